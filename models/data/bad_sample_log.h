#pragma once
// The samples a data set gave up on because they would not decode (BadSamples::Skip), each once by
// (split, index), whichever thread or epoch met it. Safe to record from several threads at once.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pipewright/dataset.h"

namespace pw::models::data {

class BadSampleLog {
 public:
  using Key = std::pair<Split, std::int64_t>;   // orders training samples first, then by index

  void record(Split split, std::int64_t index, const std::string& name);
  // Adds samples recorded elsewhere (another rank's log).
  void merge(const std::map<Key, std::string>& names);

  std::map<Key, std::string> names() const;
  std::int64_t count() const;
  // The names of the first `n` in (split, index) order: the same list whatever order they were met in.
  std::vector<std::string> first(std::size_t n) const;

 private:
  mutable std::mutex mutex_;
  std::map<Key, std::string> names_;
};

}  // namespace pw::models::data
