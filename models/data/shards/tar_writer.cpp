#include "models/data/shards/tar_writer.h"

#include <archive.h>
#include <archive_entry.h>

#include <memory>
#include <utility>

#include "core/error.h"

namespace pw::models::data::shards {

struct TarWriterCallbacks {
  static la_ssize_t write(struct archive*, void* self_ptr, const void* data, size_t size) {
    auto* self = static_cast<TarWriter*>(self_ptr);
    try {
      self->sink_(data, size);
    } catch (...) {
      self->sink_error_ = std::current_exception();
      return -1;
    }
    self->checksum_.add(data, size);
    self->bytes_ += static_cast<std::int64_t>(size);
    return static_cast<la_ssize_t>(size);
  }
};

TarWriter::TarWriter(WriteBytes sink) : sink_(std::move(sink)), archive_(archive_write_new()) {
  PW_CHECK(archive_ != nullptr, "libarchive could not allocate a writer");
  check(archive_write_set_format_pax_restricted(archive_), "choose the tar format");
  // No blocking: every byte reaches the sink as soon as it is written, so bytes_ after a header
  // is exactly where that member's data starts, and the file ends right after the end blocks.
  check(archive_write_set_bytes_per_block(archive_, 0), "set the block size");
  check(archive_write_open2(archive_, this, nullptr, &TarWriterCallbacks::write, nullptr, nullptr), "open the tar");
}

TarWriter::~TarWriter() { archive_write_free(archive_); }   // frees without the end blocks if not closed

void TarWriter::check(int status, const std::string& what) {
  if (sink_error_) std::rethrow_exception(std::exchange(sink_error_, nullptr));
  if (status < ARCHIVE_WARN) {
    const char* why = archive_error_string(archive_);
    PW_FAIL("libarchive could not " << what << ": " << (why != nullptr ? why : "unknown error"));
  }
}

std::int64_t TarWriter::add(const std::string& name, const void* data, std::size_t size) {
  PW_CHECK(!closed_, "add after close");
  std::unique_ptr<archive_entry, decltype(&archive_entry_free)> entry(archive_entry_new(), &archive_entry_free);
  archive_entry_set_pathname(entry.get(), name.c_str());
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_size(entry.get(), static_cast<la_int64_t>(size));
  archive_entry_set_mtime(entry.get(), 0, 0);   // the same folder packs to the same bytes
  check(archive_write_header(archive_, entry.get()), "write the header of '" + name + "'");
  const std::int64_t offset = bytes_;
  if (size > 0) {
    const la_ssize_t written = archive_write_data(archive_, data, size);
    check(written < 0 ? static_cast<int>(written) : ARCHIVE_OK, "write '" + name + "'");
    PW_CHECK(static_cast<std::size_t>(written) == size, "libarchive wrote " << written << " of " << size << " bytes of '" << name << "'");
  }
  check(archive_write_finish_entry(archive_), "finish '" + name + "'");
  return offset;
}

void TarWriter::close() {
  if (closed_) return;
  check(archive_write_close(archive_), "close the tar");
  closed_ = true;
}

}  // namespace pw::models::data::shards
