#pragma once
// N ThriftTransport endpoints in one process on 127.0.0.1, each on a free port, told each
// other's addresses.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rpc/thrift_transport.h"

namespace pw::test {

inline std::vector<std::unique_ptr<rpc::ThriftTransport>> loopback_world(
    int world_size, const std::string& token, const std::vector<rpc::ThriftTransportLimits>& limits = {}) {
  const std::vector<std::string> any_port(static_cast<std::size_t>(world_size), "127.0.0.1:0");
  std::vector<std::unique_ptr<rpc::ThriftTransport>> ranks;
  for (int r = 0; r < world_size; ++r)
    ranks.push_back(std::make_unique<rpc::ThriftTransport>(
        r, world_size, any_port, token, limits.empty() ? rpc::ThriftTransportLimits{} : limits[r]));
  for (auto& self : ranks)
    for (int peer = 0; peer < world_size; ++peer) self->set_peer_address(peer, ranks[peer]->address());
  return ranks;
}

inline rpc::Deadline in_ms(int ms) { return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms); }

}  // namespace pw::test
