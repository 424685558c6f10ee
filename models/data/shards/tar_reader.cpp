#include "models/data/shards/tar_reader.h"

#include <archive.h>
#include <archive_entry.h>

#include <memory>
#include <string>

#include "core/error.h"
#include "core/input_file.h"

namespace pw::models::data::shards {

void for_each_tar_member(const std::string& path, const std::function<void(const TarMember&)>& visit) {
  // Opened as every data file is (a FIFO or a device is refused before anything blocks); the
  // descriptor stays ours (libarchive's open_fd does not close it) and closes with `file`,
  // after the reader is freed.
  const InputFile file(path, "tar shard");
  std::unique_ptr<archive, decltype(&archive_read_free)> a(archive_read_new(), &archive_read_free);
  PW_CHECK(a != nullptr, "libarchive could not allocate a reader");
  archive_read_support_format_tar(a.get());
  auto fail = [&](const char* doing) {
    const char* why = archive_error_string(a.get());
    throw InputError("tar shard '" + path + "': " + doing + ": " + (why != nullptr ? why : "unknown error"));
  };
  if (archive_read_open_fd(a.get(), file.fd(), std::size_t{1} << 16) != ARCHIVE_OK) fail("cannot open");
  TarMember member;
  for (;;) {
    archive_entry* entry = nullptr;
    const int status = archive_read_next_header(a.get(), &entry);
    if (status == ARCHIVE_EOF) break;
    if (status < ARCHIVE_WARN) fail("cannot read a member header");
    if (archive_entry_filetype(entry) != AE_IFREG) continue;
    const char* name = archive_entry_pathname(entry);
    member.name = name != nullptr ? name : "";
    // A member's data lies inside the file: a header declaring more is damage, refused before any
    // buffer is sized by it.
    const la_int64_t size = archive_entry_size(entry);
    if (size < 0 || size > file.size())
      throw InputError("tar shard '" + path + "': member '" + member.name + "' declares " + std::to_string(size) +
                       " bytes, more than the shard's " + std::to_string(file.size()) + " (a damaged header)");
    member.data.resize(static_cast<std::size_t>(size));
    std::size_t got = 0;
    while (got < member.data.size()) {
      const la_ssize_t n = archive_read_data(a.get(), member.data.data() + got, member.data.size() - got);
      if (n < 0) fail(("cannot read member '" + member.name + "'").c_str());
      if (n == 0) throw InputError("tar shard '" + path + "': member '" + member.name + "' ends early (truncated file?)");
      got += static_cast<std::size_t>(n);
    }
    visit(member);
  }
}

}  // namespace pw::models::data::shards
