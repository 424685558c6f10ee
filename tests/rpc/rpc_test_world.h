#pragma once
// N ThriftTransport endpoints in one process on 127.0.0.1, each on a free port, told each
// other's addresses; and small helpers the transport tests share.
#include <chrono>
#include <cstring>
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

inline bool same_bits(const kernels::Tensor& a, const kernels::Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

// The message of what `fn` throws, or "(no error)".
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// A tensor whose bytes follow a pattern of `seed` (any dtype, exact to compare bitwise).
inline kernels::Tensor byte_pattern(const kernels::Shape& shape, kernels::DType dtype, unsigned seed) {
  kernels::Tensor t = kernels::Tensor::empty(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw());
  for (std::size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>((i * 131 + seed * 17) >> 1);
  return t;
}

}  // namespace pw::test
