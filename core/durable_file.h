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

// Paths a job makes for itself (its lock, step folders, temporary files, summaries, traces, event
// and debug files) never follow a symbolic link: one planted where the job writes is refused with
// an InputError naming it ("... is a symbolic link ..."), so nothing is written through a link the
// job did not make. The folders a user names may themselves be reached through links; what the job
// makes inside them may not.
//
// make_own_folder: creates `path` and its missing parents; an existing `path` must be a real
// folder, not a link to one nor a file. `what` names it in the error ("checkpoint folder").
bool make_own_folder(const std::string& path, std::string_view what);   // true when it made it
// Refuses `path` when it exists as anything but a plain file (a link, a folder, a FIFO, a device);
// an absent path is fine. `what` names it in the error.
void refuse_unless_plain_file(const std::string& path, std::string_view what);
// Opens `path` as a new file (O_CREAT | O_EXCL | O_NOFOLLOW, plus `flags`, e.g. O_RDWR): a link or
// any entry already there is refused, except a plain file left by an earlier run of the job when
// `replace_leftover` says so (it is unlinked first). Returns the descriptor; InputError naming the
// file otherwise.
enum class Leftover { Refuse, Replace };
int create_new_file(const std::string& path, int flags, std::string_view what, Leftover leftover = Leftover::Replace);

// A 64-bit checksum (fast, not cryptographic) for checkpoint manifests, fed in pieces of any
// size: the sum depends only on the bytes, not on how they were split.
class Checksum64 {
 public:
  void add(const void* data, std::size_t bytes);
  std::uint64_t value() const;
  std::string hex() const;

 private:
  void block(const unsigned char* p);
  std::uint64_t lane_[4] = {0x9E3779B97F4A7C15ULL, 1, 0x3C6EF372FE94F82AULL, 0x94D049BB133111EBULL};
  unsigned char pending_[32] = {};
  std::size_t pending_bytes_ = 0;
  std::uint64_t total_ = 0;
};

std::uint64_t checksum64(const void* data, std::size_t bytes);
std::string checksum_hex(std::uint64_t sum);
// The checksum of a file's bytes; InputError naming the file when it cannot be read.
std::string file_checksum(const std::string& path);

}  // namespace pw
