#pragma once
// One tar file written with libarchive (POSIX pax-restricted, i.e. plain ustar for our short
// names) into a byte sink, counting the bytes so each member's data offset is known, and summing
// them so the manifest's checksum needs no second read.
#include <cstdint>
#include <exception>
#include <string>

#include "core/durable_file.h"

struct archive;

namespace pw::models::data::shards {

class TarWriter {
 public:
  explicit TarWriter(WriteBytes sink);   // the sink must outlive the writer
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  // Appends a regular file member; returns the offset of its data in the tar.
  std::int64_t add(const std::string& name, const void* data, std::size_t size);
  void close();   // writes the end-of-archive blocks

  std::int64_t bytes() const { return bytes_; }
  std::string checksum() const { return checksum_.hex(); }

  // Bytes one member of `size` bytes adds (header and data padded to 512), and the end blocks.
  static std::int64_t member_bytes(std::int64_t size) { return 512 + (size + 511) / 512 * 512; }
  static constexpr std::int64_t kEndBytes = 1024;

 private:
  void check(int status, const std::string& what);
  friend struct TarWriterCallbacks;

  WriteBytes sink_;
  archive* archive_ = nullptr;
  std::int64_t bytes_ = 0;
  Checksum64 checksum_;
  std::exception_ptr sink_error_;   // a sink exception, kept across libarchive's C frames
  bool closed_ = false;
};

}  // namespace pw::models::data::shards
