#include "core/durable_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>
#include <algorithm>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/input_file.h"

namespace pw {
namespace {

std::string os_error(int code) { return std::strerror(code); }

// Owns a file descriptor; closing is checked where it matters (before the rename).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace

void sync_directory(const std::string& path) {
  Fd dir(::open(path.empty() ? "." : path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) throw InputError("cannot open folder '" + path + "' to flush it: " + os_error(errno));
  if (::fsync(dir.get()) != 0 && errno != EINVAL)
    throw InputError("cannot flush folder '" + path + "': " + os_error(errno));
}

namespace {

[[noreturn]] void refuse_entry(const std::string& path, std::string_view what, mode_t mode, std::string_view wanted) {
  throw InputError(std::string(what) + " '" + path + "' is " + std::string(file_kind_name(mode)) +
                   "; pipewright does not write through links or over entries it did not make: remove it, or give " +
                   "another folder (" + std::string(wanted) + " expected)");
}

}  // namespace

bool make_own_folder(const std::string& given, std::string_view what) {
  std::string path = given;
  while (path.size() > 1 && path.back() == '/') path.pop_back();   // "d/" would follow a link named d
  const std::filesystem::path folder(path);
  if (folder.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(folder.parent_path(), ec);
    if (ec) throw InputError("cannot create " + std::string(what) + " '" + path + "': " + ec.message());
  }
  if (::mkdir(path.c_str(), 0755) == 0) return true;
  const int code = errno;
  struct stat st {};
  if (code == EEXIST && ::lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      // One this job's user did not make, or that others may write into, may hold their links.
      if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        throw InputError(std::string(what) + " '" + path + "' exists and is " +
                         (st.st_uid != ::geteuid() ? "owned by another user" : "writable by other users") +
                         "; pipewright writes only into folders it made or its user owns alone: remove it, or give "
                         "another folder");
      return false;
    }
    refuse_entry(path, what, st.st_mode, "a folder");
  }
  throw InputError("cannot create " + std::string(what) + " '" + path + "': " + os_error(code));
}

void refuse_unless_plain_file(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!S_ISREG(st.st_mode)) refuse_entry(path, what, st.st_mode, "a plain file or nothing");
}

int create_new_file(const std::string& path, int flags, std::string_view what, Leftover leftover) {
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(path.c_str(), flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    const int code = errno;
    struct stat st {};
    if (code == EEXIST && ::lstat(path.c_str(), &st) == 0) {
      if (!S_ISREG(st.st_mode)) refuse_entry(path, what, st.st_mode, "a plain file or nothing");
      if (leftover == Leftover::Replace && attempt == 0 && ::unlink(path.c_str()) == 0) continue;
      throw InputError(std::string(what) + " '" + path + "' already exists; remove it or give another folder");
    }
    throw InputError("cannot create " + std::string(what) + " '" + path + "': " + os_error(code) +
                     "; check that the folder exists and is writable");
  }
}

void write_file_durably(const std::string& path, const std::function<void(const WriteBytes& write)>& fill) {
  const std::filesystem::path target(path);
  const auto folder = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  refuse_unless_plain_file(path, "file");
  const std::string tmp = path + ".tmp";
  Fd fd(create_new_file(tmp, O_WRONLY, "temporary file"));
  auto fail = [&](const std::string& why) {
    ::close(fd.release());
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw InputError("cannot write '" + path + "': " + why);
  };
  const WriteBytes write = [&](const void* data, std::size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::write(fd.get(), p, bytes);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(os_error(errno));
      }
      p += n;
      bytes -= static_cast<std::size_t>(n);
    }
  };
  try {
    fill(write);
  } catch (const InputError&) {
    // Already said what was wrong (the fill's own input, or fail() above): leave nothing behind.
    if (fd.get() >= 0) ::close(fd.release());
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  } catch (const std::exception& e) {
    fail(e.what());
  }
  if (::fsync(fd.get()) != 0) fail(os_error(errno));
  if (::close(fd.release()) != 0) fail(os_error(errno));
  try {
    refuse_unless_plain_file(path, "file");   // planted while the file was written
  } catch (const InputError&) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int code = errno;
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw InputError("cannot write '" + path + "': " + os_error(code));
  }
  sync_directory(folder);
}

void write_file_durably(const std::string& path, std::string_view contents) {
  write_file_durably(path, [&](const WriteBytes& write) { write(contents.data(), contents.size()); });
}

namespace {
std::uint64_t mix(std::uint64_t h, std::uint64_t w) {
  h ^= w + 0x632BE59BD9B4E019ULL + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ULL;
  return h ^ (h >> 31);
}
}  // namespace

// Four independent lanes of 64-bit multiply-xorshift over 32-byte blocks: memory speed, and a
// changed, moved or missing byte changes the sum.
void Checksum64::block(const unsigned char* p) {
  for (int k = 0; k < 4; ++k) {
    std::uint64_t w;
    std::memcpy(&w, p + 8 * k, 8);
    lane_[k] = mix(lane_[k], w);
  }
}

void Checksum64::add(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += bytes;
  if (pending_bytes_ > 0) {
    const std::size_t take = std::min(bytes, sizeof pending_ - pending_bytes_);
    std::memcpy(pending_ + pending_bytes_, p, take);
    pending_bytes_ += take;
    p += take;
    bytes -= take;
    if (pending_bytes_ < sizeof pending_) return;
    block(pending_);
    pending_bytes_ = 0;
  }
  for (; bytes >= 32; p += 32, bytes -= 32) block(p);
  std::memcpy(pending_, p, bytes);
  pending_bytes_ = bytes;
}

std::uint64_t Checksum64::value() const {
  std::uint64_t h = mix(mix(lane_[0], lane_[1]), mix(lane_[2], lane_[3]));
  for (std::size_t i = 0; i < pending_bytes_; ++i) h = mix(h, pending_[i]);
  return mix(h, total_);
}

std::string Checksum64::hex() const { return checksum_hex(value()); }

std::uint64_t checksum64(const void* data, std::size_t bytes) {
  Checksum64 sum;
  sum.add(data, bytes);
  return sum.value();
}

std::string file_checksum(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw InputError("cannot read '" + path + "': " + os_error(errno));
  Checksum64 sum;
  std::vector<unsigned char> buffer(std::size_t{1} << 20);
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw InputError("cannot read '" + path + "': " + os_error(errno));
    }
    if (n == 0) break;
    sum.add(buffer.data(), static_cast<std::size_t>(n));
  }
  return sum.hex();
}

std::string checksum_hex(std::uint64_t sum) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(sum));
  return text;
}

}  // namespace pw
