#pragma once
// Appends TFRecord-framed records to a file: the framing TensorFlow's event files use
// (uint64 length, masked CRC-32C of the length, the data, masked CRC-32C of the data; little endian).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string_view>

namespace pw::monitor {

class TfRecordWriter {
 public:
  // Creates `path` (its folder must exist); InputError naming it when it cannot be created.
  explicit TfRecordWriter(std::filesystem::path path);
  // Writes one record and flushes it, so that a reader watching the file sees whole records.
  // Error naming the file when the write fails (a full disk...).
  void write(std::string_view data);
  const std::filesystem::path& path() const { return path_; }

 private:
  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::filesystem::path path_;
  std::unique_ptr<std::FILE, CloseFile> file_;
};

}  // namespace pw::monitor
