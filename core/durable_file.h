#pragma once
// Files that are either whole or absent: written to a temporary name beside the target, flushed
// to the disk (fsync), renamed over the target and the folder flushed, so a crash or a full disk
// never leaves a half-written file where a good one was (nor loses the good one).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace pw {

// Writes what `fill` appends through `write` to `path` durably. On any failure (cannot create,
// disk full, rename refused) the temporary file is removed, the target is left as it was and an
// InputError says which file and why ("No space left on device").
using WriteBytes = std::function<void(const void* data, std::size_t bytes)>;
void write_file_durably(const std::string& path, const std::function<void(const WriteBytes& write)>& fill);
void write_file_durably(const std::string& path, std::string_view contents);

// Flushes a folder's entries (after a rename into it or a new file in it).
void sync_directory(const std::string& path);

// A 64-bit checksum of a whole buffer (fast, not cryptographic), for checkpoint manifests.
std::uint64_t checksum64(const void* data, std::size_t bytes, std::uint64_t seed = 0);
std::string checksum_hex(std::uint64_t sum);

}  // namespace pw
