#pragma once
// A key-value store every rank of a job can reach: how ranks exchange small facts at start-up
// (NCCL unique ids, Gloo's store, a split chosen by rank 0). In a multi-process job it is the
// rendezvous service on rank 0; in an embedded job (ranks as threads) it is an InMemoryStore.
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "rpc/transport.h"

namespace pw::rpc {

class Store {
 public:
  virtual ~Store() = default;
  // Sets `key` (overwriting); values are arbitrary bytes.
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` is set and returns its value; TimeoutError naming the key at the deadline.
  virtual std::string get(const std::string& key, Deadline deadline) = 0;
};

class InMemoryStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Deadline deadline) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace pw::rpc
