#include "train/monitor/tfrecord_writer.h"

#include <array>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "core/durable_file.h"
#include "core/error.h"
#include "train/monitor/crc32c.h"

namespace pw::monitor {
namespace {

template <typename T>
void put_le(std::byte* out, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<std::byte>((value >> (8 * i)) & 0xFFu);
}

}  // namespace

TfRecordWriter::TfRecordWriter(std::filesystem::path path) : path_(std::move(path)) {
  const int fd = create_new_file(path_.string(), O_WRONLY, "TensorBoard event file", Leftover::Refuse);
  file_.reset(::fdopen(fd, "wb"));
  if (file_ == nullptr) ::close(fd);
  PW_INPUT_CHECK(file_ != nullptr, path_.string() << ": cannot create the event file: " << std::strerror(errno));
}

void TfRecordWriter::write(std::string_view data) {
  std::array<std::byte, 12> header{};
  put_le(header.data(), static_cast<std::uint64_t>(data.size()));
  put_le(header.data() + 8, masked_crc32c(std::span(header.data(), 8)));
  const auto payload = std::as_bytes(std::span(data.data(), data.size()));
  std::array<std::byte, 4> footer{};
  put_le(footer.data(), masked_crc32c(payload));
  const bool written = std::fwrite(header.data(), 1, header.size(), file_.get()) == header.size() &&
                       std::fwrite(data.data(), 1, data.size(), file_.get()) == data.size() &&
                       std::fwrite(footer.data(), 1, footer.size(), file_.get()) == footer.size() &&
                       std::fflush(file_.get()) == 0;
  // A full disk or a failing one is the operator's to mend, not a bug (status 2, not 3).
  PW_INPUT_CHECK(written, path_.string() << ": writing an event record failed: " << std::strerror(errno));
}

}  // namespace pw::monitor
