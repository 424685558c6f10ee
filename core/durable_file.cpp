#include "core/durable_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "core/error.h"

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

void write_file_durably(const std::string& path, const std::function<void(const WriteBytes& write)>& fill) {
  const std::filesystem::path target(path);
  const auto folder = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  const std::string tmp = path + ".tmp";
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw InputError("cannot write '" + tmp + "': " + os_error(errno) + "; check that the folder exists and is writable");
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
    throw;
  } catch (const std::exception& e) {
    fail(e.what());
  }
  if (::fsync(fd.get()) != 0) fail(os_error(errno));
  if (::close(fd.release()) != 0) fail(os_error(errno));
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

std::uint64_t checksum64(const void* data, std::size_t bytes, std::uint64_t seed) {
  // Four independent lanes of 64-bit multiply-xorshift over 8-byte words: memory speed, and a
  // changed, moved or missing byte changes the sum.
  constexpr std::uint64_t kMul = 0x9E3779B97F4A7C15ULL;
  auto mix = [](std::uint64_t h, std::uint64_t w) {
    h ^= w + 0x632BE59BD9B4E019ULL + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 31);
  };
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t lane[4] = {seed ^ kMul, seed + 1, seed + 2 * kMul, seed ^ 0x94D049BB133111EBULL};
  std::size_t i = 0;
  for (; i + 32 <= bytes; i += 32)
    for (int k = 0; k < 4; ++k) {
      std::uint64_t w;
      std::memcpy(&w, p + i + 8 * static_cast<std::size_t>(k), 8);
      lane[k] = mix(lane[k], w);
    }
  std::uint64_t h = mix(mix(lane[0], lane[1]), mix(lane[2], lane[3]));
  for (; i < bytes; ++i) h = mix(h, p[i]);
  return mix(h, static_cast<std::uint64_t>(bytes));
}

std::string checksum_hex(std::uint64_t sum) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(sum));
  return text;
}

}  // namespace pw
