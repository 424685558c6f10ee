#pragma once
// Data files a job reads (CIFAR-10 batches, IDX files, images, shard indexes, manifests, tar
// shards) are opened so that hostile input cannot hang or exhaust the process: O_RDONLY |
// O_CLOEXEC | O_NONBLOCK (a FIFO opens at once instead of waiting for a writer), then fstat; only a
// regular file is accepted (a FIFO, a device such as a link to /dev/zero, a folder or a socket is
// one InputError naming the file, what it is and what is accepted). O_NONBLOCK is cleared before
// anything is read. Whole-file reads refuse a file larger than its format allows before reading a
// byte, and read exactly the st_size bytes fstat reported (a file that shrinks meanwhile is an
// error, one that grows is read as it was).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pw {

class InputFile {
 public:
  // `what` names the file in messages: "CIFAR-10 batch file", "shard index".
  InputFile(const std::string& path, std::string_view what);
  ~InputFile();
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  std::int64_t size() const { return size_; }   // st_size at open
  const std::string& path() const { return path_; }
  const std::string& what() const { return what_; }
  // Hands the descriptor over (to gzdopen, libarchive): the caller closes it from then on.
  int release();

  // Reads exactly `bytes` bytes at `offset` (pread; EINTR retried). InputError naming the file when
  // it ends first or the read fails.
  void read_at(void* out, std::size_t bytes, std::int64_t offset) const;
  // Up to `bytes` bytes at `offset`, fewer only at the end of the file; returns how many.
  std::size_t read_some_at(void* out, std::size_t bytes, std::int64_t offset) const;

  // The whole file (size() bytes), refused before reading when size() > max_bytes; `limit` says
  // why the format allows no more ("10000 records of 3073 bytes").
  std::string read_all(std::int64_t max_bytes, std::string_view limit = {}) const;
  std::vector<std::uint8_t> read_all_bytes(std::int64_t max_bytes, std::string_view limit = {}) const;

  // Throws the one-line InputError "<what> '<path>' is N bytes, more than the M accepted (limit)".
  [[noreturn]] void refuse_size(std::int64_t max_bytes, std::string_view limit) const;

 private:
  std::string path_;
  std::string what_;
  int fd_ = -1;
  std::int64_t size_ = 0;
};

// InputFile(path, what).read_all(max_bytes, limit).
std::string read_whole(const std::string& path, std::string_view what, std::int64_t max_bytes,
                       std::string_view limit = {});
std::vector<std::uint8_t> read_whole_bytes(const std::string& path, std::string_view what, std::int64_t max_bytes,
                                           std::string_view limit = {});

// "a named pipe (FIFO)", "a character device", "a folder", ... for a stat mode that is not a
// regular file.
std::string_view file_kind_name(unsigned mode);

}  // namespace pw
