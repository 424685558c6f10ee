#include "rpc/store.h"

namespace pw::rpc {

void InMemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mutex_);
    values_[key] = value;
  }
  changed_.notify_all();
}

std::string InMemoryStore::get(const std::string& key, Deadline deadline) {
  std::unique_lock lock(mutex_);
  if (!changed_.wait_until(lock, deadline, [&] { return values_.count(key) > 0; }))
    throw TimeoutError("store key '" + key + "' was not set before the deadline");
  return values_.at(key);
}

}  // namespace pw::rpc
