#pragma once
// Parameter servers on loopback in the test's own process, and the message of a failed call:
// shared by the server tests and the worker-side (PsEmbeddingBag) tests.
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dataparallel/ps/server.h"

namespace pw::test {

struct PsTestServers {
  PsTestServers(int shards, int workers, dp::UpdateMode mode, const std::string& token,
                std::size_t max_keys = std::size_t{1} << 22, const std::filesystem::path& dir = {}) {
    for (int s = 0; s < shards; ++s) {
      dp::PsShardConfig c;
      c.shard = s;
      c.shards = shards;
      c.workers = workers;
      c.mode = mode;
      c.max_keys = max_keys;
      if (!dir.empty()) c.dir = (dir / ("shard" + std::to_string(s))).string();
      servers.push_back(std::make_unique<dp::PsServer>(rpc::HostPort{"127.0.0.1", 0}, c, token));
      addresses.push_back(servers.back()->address());
    }
  }
  std::vector<std::unique_ptr<dp::PsServer>> servers;
  std::vector<rpc::HostPort> addresses;
};

// What `f` threw, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace pw::test
