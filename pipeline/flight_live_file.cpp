#include "pipeline/flight_live_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/durable_file.h"
#include "core/error.h"

namespace pw::pipeline {

namespace {

constexpr char kMagic[16] = "pwflight-live-1";
constexpr std::size_t kMaxCapacity = std::size_t{1} << 20;
constexpr std::size_t kMaxProgramBytes = std::size_t{64} << 20;

struct Header {
  char magic[16];
  std::uint32_t header_bytes;
  std::uint32_t entry_bytes;
  std::uint64_t capacity;
  std::int32_t rank, stage, replica, stages, replicas, chunks;
  std::int64_t pid;
  char host[64];
  std::uint64_t program_bytes;
  std::uint64_t started;   // written through atomic_ref
  std::int64_t alive_ns;   // written through atomic_ref
};

struct Slot {
  std::uint64_t sequence_plus_one;   // 0: empty, or being written when the writer stopped
  std::int64_t step;
  std::int32_t op, micro_batch, chunk, overlap;
  std::int32_t index, peer_stage, message_virtual_stage, state;
  std::int64_t bytes, start_ns, end_ns;
  std::uint64_t sequence_check;      // sequence_plus_one again, written last: a reader of a running
                                     // process's file skips a slot whose two copies differ
};

static_assert(sizeof(Header) % alignof(std::uint64_t) == 0 && sizeof(Slot) % alignof(std::uint64_t) == 0);

Slot* slots_of(void* map) { return reinterpret_cast<Slot*>(static_cast<char*>(map) + sizeof(Header)); }

}  // namespace

std::string flight_host_name() {
  char name[64] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

FlightLiveFile::FlightLiveFile(std::string path, const FlightLiveIdentity& id, std::size_t capacity)
    : path_(std::move(path)), capacity_(capacity) {
  PW_CHECK(capacity >= 1 && capacity <= kMaxCapacity, "a live flight record of " << capacity << " entries");
  bytes_ = sizeof(Header) + capacity * sizeof(Slot) + id.program.size();
  // Made whole under a temporary name and renamed into place, so a reader never finds it half
  // made, and replacing the file of an earlier run never shows that run's entries under this header.
  const std::string temporary = path_ + ".new" + std::to_string(::getpid());
  refuse_unless_plain_file(path_, "live flight record");
  const int fd = create_new_file(temporary, O_RDWR, "live flight record");
  // The disk blocks are allocated now: a full disk later would make a write to the mapping SIGBUS.
  const int size_error = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_));
  void* map = size_error == 0 ? ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int map_error = errno;
  struct stat made {};
  const bool stated = map != MAP_FAILED && ::fstat(fd, &made) == 0;
  ::close(fd);   // the mapping keeps the file
  if (map == MAP_FAILED || !stated) {
    if (map != MAP_FAILED) ::munmap(map, bytes_);
    ::unlink(temporary.c_str());
    // A full disk (the usual cause) is the operator's to mend: an input error, not a bug.
    throw InputError("live flight record " + path_ + ": cannot " + (size_error != 0 ? "allocate" : "map") + " it (" +
                     std::to_string(bytes_) + " bytes): " + std::strerror(size_error != 0 ? size_error : map_error));
  }
  map_ = map;
  device_ = made.st_dev;
  inode_ = made.st_ino;
  auto* h = static_cast<Header*>(map_);
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  h->header_bytes = sizeof(Header);
  h->entry_bytes = sizeof(Slot);
  h->capacity = capacity;
  h->rank = id.rank;
  h->stage = id.stage;
  h->replica = id.replica;
  h->stages = id.stages;
  h->replicas = id.replicas;
  h->chunks = id.chunks;
  h->pid = static_cast<std::int64_t>(::getpid());
  const std::string host = flight_host_name();
  std::memcpy(h->host, host.data(), std::min(host.size(), sizeof h->host - 1));
  h->program_bytes = id.program.size();
  std::memcpy(static_cast<char*>(map_) + sizeof(Header) + capacity * sizeof(Slot), id.program.data(), id.program.size());
  touch(steady_now_ns());
  try {
    refuse_unless_plain_file(path_, "live flight record");   // planted while it was made
  } catch (const InputError&) {
    ::munmap(map_, bytes_);
    map_ = nullptr;
    ::unlink(temporary.c_str());
    throw;
  }
  if (::rename(temporary.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::munmap(map_, bytes_);
    map_ = nullptr;
    ::unlink(temporary.c_str());
    PW_FAIL("live flight record " << path_ << ": cannot create it: " << std::strerror(error));
  }
}

FlightLiveFile::~FlightLiveFile() {
  if (map_ != nullptr) ::munmap(map_, bytes_);
}

void FlightLiveFile::write(const FlightEntry& e, std::uint64_t started) noexcept {
  Slot& s = slots_of(map_)[e.sequence % capacity_];
  // Both copies of the sequence cleared first, then the fields, then both set (the check last),
  // with fences between: a kill part-way leaves the slot marked empty or its two copies different.
  std::atomic_ref<std::uint64_t>(s.sequence_check).store(0, std::memory_order_relaxed);
  std::atomic_ref<std::uint64_t>(s.sequence_plus_one).store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  s.step = e.step;
  s.op = static_cast<std::int32_t>(e.instruction.op);
  s.micro_batch = e.instruction.micro_batch;
  s.chunk = e.instruction.chunk;
  s.overlap = static_cast<std::int32_t>(e.instruction.overlap);
  s.index = e.index;
  s.peer_stage = e.peer_stage;
  s.message_virtual_stage = e.message_virtual_stage;
  s.state = static_cast<std::int32_t>(e.state);
  s.bytes = e.bytes;
  s.start_ns = e.start_ns;
  s.end_ns = e.end_ns;
  std::atomic_thread_fence(std::memory_order_release);
  std::atomic_ref<std::uint64_t>(s.sequence_plus_one).store(e.sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::atomic_ref<std::uint64_t>(s.sequence_check).store(e.sequence + 1, std::memory_order_relaxed);
  auto* h = static_cast<Header*>(map_);
  std::atomic_ref<std::uint64_t>(h->started).store(started, std::memory_order_release);
  touch(e.end_ns != 0 ? e.end_ns : e.start_ns);
}

void FlightLiveFile::touch(std::int64_t now_ns) noexcept {
  auto* h = static_cast<Header*>(map_);
  std::atomic_ref<std::int64_t> alive(h->alive_ns);
  // Records and touches come from two threads: the clock in the file never goes back.
  std::int64_t seen = alive.load(std::memory_order_relaxed);
  while (seen < now_ns && !alive.compare_exchange_weak(seen, now_ns, std::memory_order_release)) {
  }
}

void FlightLiveFile::remove() noexcept {
  // Only this file: another run given the same folder may have replaced it since.
  struct stat now {};
  if (::stat(path_.c_str(), &now) == 0 && now.st_dev == device_ && now.st_ino == inode_) ::unlink(path_.c_str());
}

FlightLiveRecord read_flight_live_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PW_INPUT_CHECK(in, path << ": cannot read it");
  Header h{};
  in.read(reinterpret_cast<char*>(&h), sizeof h);
  PW_INPUT_CHECK(in.gcount() == static_cast<std::streamsize>(sizeof h),
                 path << ": not a live flight record (" << in.gcount() << " bytes, shorter than its header)");
  PW_INPUT_CHECK(std::memcmp(h.magic, kMagic, sizeof kMagic) == 0, path << ": not a live flight record (no 'pwflight-live-1' header)");
  PW_INPUT_CHECK(h.header_bytes == sizeof(Header) && h.entry_bytes == sizeof(Slot),
                 path << ": a live flight record of another layout (header " << h.header_bytes << " and entry "
                      << h.entry_bytes << " bytes; this build writes " << sizeof(Header) << " and " << sizeof(Slot) << ")");
  PW_INPUT_CHECK(h.capacity >= 1 && h.capacity <= kMaxCapacity && h.program_bytes <= kMaxProgramBytes,
                 path << ": a live flight record of " << h.capacity << " entries and a program of " << h.program_bytes
                      << " bytes; expected 1 to " << kMaxCapacity << " entries and at most " << kMaxProgramBytes << " bytes");
  const std::size_t expected = sizeof(Header) + h.capacity * sizeof(Slot) + h.program_bytes;
  std::error_code size_error;
  const auto size = std::filesystem::file_size(path, size_error);
  PW_INPUT_CHECK(!size_error && size == expected,
                 path << ": a live flight record of " << size << " bytes; its header says " << expected);
  std::string bytes(expected, '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(expected));
  PW_INPUT_CHECK(in.gcount() == static_cast<std::streamsize>(expected), path << ": cannot read its " << expected << " bytes");
  FlightLiveRecord r;
  r.identity = {h.rank, h.stage, h.replica, h.stages, h.replicas, h.chunks,
                bytes.substr(sizeof(Header) + h.capacity * sizeof(Slot), h.program_bytes)};
  r.pid = h.pid;
  r.host.assign(h.host, strnlen(h.host, sizeof h.host));
  r.alive_ns = h.alive_ns;
  r.capacity = h.capacity;
  constexpr auto kLastOp = static_cast<std::int32_t>(OpType::OptimizerStep);
  for (std::size_t i = 0; i < h.capacity; ++i) {
    Slot s{};
    std::memcpy(&s, bytes.data() + sizeof(Header) + i * sizeof(Slot), sizeof s);
    if (s.sequence_plus_one == 0 || s.sequence_check != s.sequence_plus_one) continue;   // cut or being written
    const std::uint64_t sequence = s.sequence_plus_one - 1;
    // A slot holds the entries of its own sequences only; anything else is damage. (Not checked
    // against the header's count: a file read while it is written may hold newer slots.)
    PW_INPUT_CHECK(sequence % h.capacity == i && s.op >= 0 && s.op <= kLastOp &&
                       s.state >= 0 && s.state <= static_cast<std::int32_t>(FlightState::Failed) && s.overlap >= 0 &&
                       s.overlap <= static_cast<std::int32_t>(Overlap::WithNext),
                   path << ": entry " << i << " is damaged (sequence " << sequence << ", operation " << s.op
                        << ", state " << s.state << ")");
    FlightEntry e;
    e.sequence = sequence;
    e.step = s.step;
    e.instruction = {static_cast<OpType>(s.op), s.micro_batch, s.chunk, static_cast<Overlap>(s.overlap)};
    e.index = s.index;
    e.peer_stage = s.peer_stage;
    e.message_virtual_stage = s.message_virtual_stage;
    e.bytes = s.bytes;
    e.start_ns = s.start_ns;
    e.end_ns = s.end_ns;
    e.state = static_cast<FlightState>(s.state);
    r.entries.push_back(e);
  }
  std::sort(r.entries.begin(), r.entries.end(), [](const auto& a, const auto& b) { return a.sequence < b.sequence; });
  return r;
}

}  // namespace pw::pipeline
