#pragma once
// The sizes that client and server of the parameter servers agree on. A request is at most
// kPsMaxKeysPerRequest keys and kPsMaxFrameBytes bytes (both refused above that, so a peer that
// has not shown the job token yet makes a server buffer at most one such frame); the client
// splits a pull or push of any size into chunks of about kPsChunkBytes and sends a shard's chunks
// over up to kPsConnectionsPerShard connections at once.
#include <cstddef>
#include <cstdint>

namespace pw::dp {

inline constexpr std::size_t kPsMaxKeysPerRequest = std::size_t{1} << 20;   // the Thrift list limit too
inline constexpr std::size_t kPsMaxFrameBytes = std::size_t{64} << 20;
inline constexpr std::size_t kPsChunkBytes = std::size_t{4} << 20;
inline constexpr int kPsConnectionsPerShard = 4;

// Keys per chunk for rows of `dim` floats: a key (8 bytes) and its row (4 * dim) per entry.
inline std::size_t ps_keys_per_chunk(int dim) {
  const std::size_t entry = sizeof(std::int64_t) + sizeof(float) * static_cast<std::size_t>(dim > 0 ? dim : 1);
  const std::size_t keys = kPsChunkBytes / entry;
  return keys < 1 ? 1 : (keys > kPsMaxKeysPerRequest ? kPsMaxKeysPerRequest : keys);
}

}  // namespace pw::dp
