#pragma once
// The sizes that client and server of the parameter servers agree on. A request is at most
// kPsMaxKeysPerRequest keys and kPsMaxFrameBytes bytes (both refused above that, so a peer that
// has not shown the job token yet makes a server buffer at most one such frame); the client
// splits a pull or push of any size into chunks of at most kPsChunkBytes, of equal size, and sends
// a shard's chunks over up to kPsConnectionsPerShard connections at once. A pull also goes in a
// chunk per kPsSplitBytes (up to one per connection), so that the server (a thread per
// connection) reads rows on several cores; a push is split only where it must be: the server
// holds its parts until the last and applies them in one go, so a split push costs a copy and
// gains no parallelism (ps_bench on 2 cores: a 2 MiB push whole 1.8 GB/s, in 4 parts 1.0 GB/s).
#include <cstddef>
#include <cstdint>

namespace pw::dp {

inline constexpr std::size_t kPsMaxKeysPerRequest = std::size_t{1} << 20;   // the Thrift list limit too
inline constexpr std::size_t kPsMaxFrameBytes = std::size_t{64} << 20;
inline constexpr std::size_t kPsChunkBytes = std::size_t{4} << 20;
inline constexpr std::size_t kPsSplitBytes = std::size_t{2} << 20;
inline constexpr int kPsConnectionsPerShard = 4;

// Keys per chunk for rows of `dim` floats: a key (8 bytes) and its row (4 * dim) per entry.
inline std::size_t ps_keys_per_chunk(int dim) {
  const std::size_t entry = sizeof(std::int64_t) + sizeof(float) * static_cast<std::size_t>(dim > 0 ? dim : 1);
  const std::size_t keys = kPsChunkBytes / entry;
  return keys < 1 ? 1 : (keys > kPsMaxKeysPerRequest ? kPsMaxKeysPerRequest : keys);
}

// How many chunks a request of n keys of rows of `dim` floats goes in (at least one): a push's
// parts, and a pull's chunks (more, to use every connection, when it is large).
inline std::size_t ps_push_parts(std::size_t n, int dim) {
  const std::size_t per_chunk = ps_keys_per_chunk(dim);
  const std::size_t parts = (n + per_chunk - 1) / per_chunk;
  return parts < 1 ? 1 : parts;
}
inline std::size_t ps_pull_chunks(std::size_t n, int dim) {
  const std::size_t entry = sizeof(std::int64_t) + sizeof(float) * static_cast<std::size_t>(dim > 0 ? dim : 1);
  const std::size_t split = (n * entry) / kPsSplitBytes;
  const std::size_t wanted = split < static_cast<std::size_t>(kPsConnectionsPerShard) ? split : kPsConnectionsPerShard;
  const std::size_t parts = ps_push_parts(n, dim);
  return parts < wanted ? wanted : parts;
}

// Keys [first, last) of chunk i of `chunks` over n keys: sizes differ by at most one.
struct PsChunk {
  std::size_t first, last;
};
inline PsChunk ps_chunk(std::size_t i, std::size_t chunks, std::size_t n) { return {i * n / chunks, (i + 1) * n / chunks}; }

}  // namespace pw::dp
