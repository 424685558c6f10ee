#pragma once
// A table's write-ahead log on a parameter server: one record per push call (sequence, step,
// worker, part of how many parts, keys, gradients), appended with write(2) and flushed to the disk (fdatasync) before append
// returns, so a push the server acknowledges survives the server and the machine going down.
// A log that cannot be opened or written throws (Error naming the file and the OS's reason); the
// shard then refuses the push instead of acknowledging one it did not log. A failed append is
// cut off again; if even that fails the log is closed and says it may end in a torn record.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dataparallel/ps/bounds.h"

namespace pw::dp {

struct PsLogRecord {
  // A push part, or what the push of the same sequence number did to a bounded table (rows
  // admitted, evicted, expired, gradient rows dropped): replay recomputes it and checks it.
  enum class Kind { Push, Effects };
  Kind kind = Kind::Push;
  std::uint64_t sequence = 0;
  std::int64_t step = 0;
  std::int32_t worker = 0;
  std::int32_t part = 0, parts = 1;   // records of older logs (magic "PWAL") are whole pushes
  std::int64_t push_id = 0;
  std::vector<std::int64_t> keys;
  std::vector<float> grads;   // keys.size() * dim
  ApplyEffects effects;       // Kind::Effects
};

class PsWriteAheadLog {
 public:
  enum class Open { Append, Truncate };

  PsWriteAheadLog() = default;
  ~PsWriteAheadLog();
  PsWriteAheadLog(const PsWriteAheadLog&) = delete;
  PsWriteAheadLog& operator=(const PsWriteAheadLog&) = delete;

  void open(const std::string& path, Open how);   // Error when it cannot
  void close() noexcept;
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

  void append(std::uint64_t sequence, std::int64_t step, std::int32_t worker, const std::vector<std::int64_t>& keys,
              const float* grads, int dim, std::int32_t part = 0, std::int32_t parts = 1, std::int64_t push_id = 0);
  // What the push `sequence` did to a bounded table. Written after the push was applied and not
  // flushed on its own (the next push's flush takes it along): replay recomputes the effects from
  // the pushes, so a lost effects record loses nothing; one that is there must match.
  void append_effects(std::uint64_t sequence, const ApplyEffects& effects);

  // Calls `each` for every whole record of the log at `path` in order (none if it is absent) until
  // it returns false. A record cut short (a crash while writing it, so never acknowledged) ends
  // the log.
  static void replay(const std::string& path, int dim, std::size_t max_keys,
                     const std::function<bool(const PsLogRecord&)>& each);

 private:
  void write_record(const std::string& record, bool flush);
  int fd_ = -1;
  std::string path_;
};

}  // namespace pw::dp
