#include "models/data/bad_sample_log.h"

namespace pw::models::data {

void BadSampleLog::record(Split split, std::int64_t index, const std::string& name) {
  std::lock_guard lock(mutex_);
  names_.try_emplace({split, index}, name);
}

void BadSampleLog::merge(const std::map<Key, std::string>& names) {
  std::lock_guard lock(mutex_);
  names_.insert(names.begin(), names.end());
}

std::map<BadSampleLog::Key, std::string> BadSampleLog::names() const {
  std::lock_guard lock(mutex_);
  return names_;
}

std::int64_t BadSampleLog::count() const {
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(names_.size());
}

std::vector<std::string> BadSampleLog::first(std::size_t n) const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (auto it = names_.begin(); it != names_.end() && out.size() < n; ++it) out.push_back(it->second);
  return out;
}

}  // namespace pw::models::data
