#include "dataparallel/ps/wal.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

namespace pw::dp {

namespace {

constexpr std::uint32_t kWalMagic = 0x4c415750;       // "PWAL": a whole push
constexpr std::uint32_t kWalPartMagic = 0x32415750;   // "PWA2": one part of a push, with part, parts and push id
constexpr std::uint32_t kWalEffectsMagic = 0x31454150;   // "PAE1": what a push did to a bounded table

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
bool get(std::istream& in, T& v) {
  in.read(reinterpret_cast<char*>(&v), sizeof v);
  return in.good();
}

}  // namespace

PsWriteAheadLog::~PsWriteAheadLog() { close(); }

void PsWriteAheadLog::open(const std::string& path, Open how) {
  close();
  path_ = path;
  // Never through a planted link, and never blocking on a planted FIFO.
  const int flags =
      O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (how == Open::Truncate ? O_TRUNC : 0);
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) {
    const int code = errno;
    throw InputError("cannot open the write-ahead log '" + path + "': " +
                (code == ELOOP ? std::string("it is a symbolic link (pipewright does not write through links it did not make)")
                               : std::string(std::strerror(code))));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
    close();
    throw InputError("cannot open the write-ahead log '" + path + "': it is " +
                     (S_ISREG(st.st_mode) ? "hard-linked elsewhere" : "not a plain file") +
                     " (pipewright writes only files it made)");
  }
}

void PsWriteAheadLog::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void PsWriteAheadLog::append(std::uint64_t sequence, std::int64_t step, std::int32_t worker,
                             const std::vector<std::int64_t>& keys, const float* grads, int dim, std::int32_t part,
                             std::int32_t parts, std::int64_t push_id) {
  if (fd_ < 0) throw Error("the write-ahead log '" + path_ + "' is not open");
  const auto n = static_cast<std::uint64_t>(keys.size());
  std::string record;
  record.reserve(32 + n * sizeof(std::int64_t) + n * static_cast<std::uint64_t>(dim) * sizeof(float));
  put(record, kWalPartMagic);
  put(record, sequence);
  put(record, step);
  put(record, worker);
  put(record, part);
  put(record, parts);
  put(record, push_id);
  put(record, n);
  record.append(reinterpret_cast<const char*>(keys.data()), n * sizeof(std::int64_t));
  record.append(reinterpret_cast<const char*>(grads), n * static_cast<std::uint64_t>(dim) * sizeof(float));
  write_record(record, true);
}

void PsWriteAheadLog::append_effects(std::uint64_t sequence, const ApplyEffects& effects) {
  if (fd_ < 0) throw Error("the write-ahead log '" + path_ + "' is not open");
  std::string record;
  put(record, kWalEffectsMagic);
  put(record, sequence);
  put(record, effects.dropped);
  for (const auto* keys : {&effects.admitted, &effects.evicted, &effects.expired}) {
    put(record, static_cast<std::uint64_t>(keys->size()));
    record.append(reinterpret_cast<const char*>(keys->data()), keys->size() * sizeof(std::int64_t));
  }
  write_record(record, false);
}

void PsWriteAheadLog::write_record(const std::string& record, bool flush) {
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  if (end < 0) throw Error("cannot append to the write-ahead log '" + path_ + "': " + std::strerror(errno));
  // A record that did not wholly reach the disk is cut off again, so the log never ends in a
  // torn record that later ones would sit behind (replay stops at the first one).
  auto fail = [&](const char* doing) {
    const std::string why = std::string("cannot ") + doing + " the write-ahead log '" + path_ + "': " + std::strerror(errno);
    if (::ftruncate(fd_, end) != 0) {
      close();
      throw Error(why + "; it may end in a torn record (" + std::strerror(errno) + ")");
    }
    throw Error(why);
  };
  const char* p = record.data();
  std::size_t left = record.size();
  while (left > 0) {
    const ssize_t wrote = ::write(fd_, p, left);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    p += wrote;
    left -= static_cast<std::size_t>(wrote);
  }
  // Per push, as the design promises an acknowledged push is on the disk (a few milliseconds on
  // a disk, paid only by servers with a folder). Each table syncs its own log, so pushes to
  // different tables sync in parallel.
  if (flush && ::fdatasync(fd_) != 0) fail("flush to the disk");
}

void PsWriteAheadLog::replay(const std::string& path, int dim, std::size_t max_keys,
                             const std::function<bool(const PsLogRecord&)>& each) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  const auto width = static_cast<std::size_t>(dim);
  while (in.peek() != EOF) {
    std::uint32_t magic = 0;
    std::uint64_t n = 0;
    PsLogRecord r;
    if (!get(in, magic) || (magic != kWalMagic && magic != kWalPartMagic && magic != kWalEffectsMagic) ||
        !get(in, r.sequence))
      return;
    if (magic == kWalEffectsMagic) {
      r.kind = PsLogRecord::Kind::Effects;
      if (!get(in, r.effects.dropped)) return;
      for (auto* keys : {&r.effects.admitted, &r.effects.evicted, &r.effects.expired}) {
        if (!get(in, n) || n > (std::uint64_t{1} << 30)) return;
        keys->resize(n);
        in.read(reinterpret_cast<char*>(keys->data()), static_cast<std::streamsize>(n * sizeof(std::int64_t)));
        if (static_cast<std::uint64_t>(in.gcount()) != n * sizeof(std::int64_t)) return;
      }
      if (!each(r)) return;
      continue;
    }
    if (!get(in, r.step) || !get(in, r.worker)) return;
    if (magic == kWalPartMagic && (!get(in, r.part) || !get(in, r.parts) || !get(in, r.push_id))) return;
    // Logs written before requests were chunked hold whole pushes of up to 2^22 keys.
    if (!get(in, n) || n > std::max<std::size_t>(max_keys, std::size_t{1} << 22)) return;
    r.keys.resize(n);
    r.grads.resize(n * width);
    const auto grad_bytes = static_cast<std::streamsize>(r.grads.size() * sizeof(float));
    in.read(reinterpret_cast<char*>(r.keys.data()), static_cast<std::streamsize>(n * sizeof(std::int64_t)));
    in.read(reinterpret_cast<char*>(r.grads.data()), grad_bytes);
    if (!in.good() && !(in.eof() && in.gcount() == grad_bytes)) return;
    if (!each(r)) return;
  }
}

}  // namespace pw::dp
