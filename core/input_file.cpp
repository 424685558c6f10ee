#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "core/error.h"

namespace pw {
namespace {

std::string os_message(int error) { return std::error_code(error, std::generic_category()).message(); }

std::string named(std::string_view what, const std::string& path) {
  std::string out(what);
  out += " '";
  out += path;
  out += "'";
  return out;
}

[[noreturn]] void refuse_kind(std::string_view what, const std::string& path, unsigned mode) {
  throw InputError(named(what, path) + " is " + std::string(file_kind_name(mode)) +
                   ", not a regular file; expected a regular file (or a link to one)");
}

}  // namespace

std::string_view file_kind_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFIFO: return "a named pipe (FIFO)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFDIR: return "a folder";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    case S_IFREG: return "a regular file";
    default: return "not a regular file";
  }
}

InputFile::InputFile(const std::string& path, std::string_view what) : path_(path), what_(what) {
  // stat first: a device is refused without opening it (opening some devices has effects of its
  // own); fstat after the open is what counts, should the path change in between.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    throw InputError("cannot open " + named(what, path) + ": " + os_message(error));
  }
  if (!S_ISREG(st.st_mode)) refuse_kind(what, path, st.st_mode);
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int error = errno;
    throw InputError("cannot open " + named(what, path) + ": " + os_message(error));
  }
  fd_ = fd;   // closed by the destructor from here on, also when a check below throws
  try {
    if (::fstat(fd_, &st) != 0) {
      const int error = errno;
      throw InputError("cannot read " + named(what, path) + ": " + os_message(error));
    }
    if (!S_ISREG(st.st_mode)) refuse_kind(what, path, st.st_mode);
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) {
      const int error = errno;
      throw InputError("cannot read " + named(what, path) + ": " + os_message(error));
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
  size_ = static_cast<std::int64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), what_(std::move(other.what_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

int InputFile::release() { return std::exchange(fd_, -1); }

std::size_t InputFile::read_some_at(void* out, std::size_t bytes, std::int64_t offset) const {
  PW_CHECK(fd_ >= 0, "read from " << named(what_, path_) << " after its descriptor was handed over");
  PW_CHECK(offset >= 0, "negative offset " << offset << " into " << named(what_, path_));
  auto* p = static_cast<unsigned char*>(out);
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::pread(fd_, p + got, bytes - got, static_cast<off_t>(offset) + static_cast<off_t>(got));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      throw InputError("cannot read " + named(what_, path_) + ": " + os_message(error));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  return got;
}

void InputFile::read_at(void* out, std::size_t bytes, std::int64_t offset) const {
  const std::size_t got = read_some_at(out, bytes, offset);
  if (got < bytes)
    throw InputError(named(what_, path_) + " ends at byte " + std::to_string(offset + static_cast<std::int64_t>(got)) +
                     ", before the " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                     " (truncated, or changed while read)");
}

void InputFile::refuse_size(std::int64_t max_bytes, std::string_view limit) const {
  std::string message = named(what_, path_) + " is " + std::to_string(size_) + " bytes, more than the " +
                        std::to_string(max_bytes) + " accepted";
  if (!limit.empty()) message += " (" + std::string(limit) + ")";
  throw InputError(message);
}

std::string InputFile::read_all(std::int64_t max_bytes, std::string_view limit) const {
  if (size_ > max_bytes) refuse_size(max_bytes, limit);
  std::string out(static_cast<std::size_t>(size_), '\0');
  read_at(out.data(), out.size(), 0);
  return out;
}

std::vector<std::uint8_t> InputFile::read_all_bytes(std::int64_t max_bytes, std::string_view limit) const {
  if (size_ > max_bytes) refuse_size(max_bytes, limit);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(size_));
  read_at(out.data(), out.size(), 0);
  return out;
}

std::string read_whole(const std::string& path, std::string_view what, std::int64_t max_bytes, std::string_view limit) {
  return InputFile(path, what).read_all(max_bytes, limit);
}

std::vector<std::uint8_t> read_whole_bytes(const std::string& path, std::string_view what, std::int64_t max_bytes,
                                           std::string_view limit) {
  return InputFile(path, what).read_all_bytes(max_bytes, limit);
}

}  // namespace pw
