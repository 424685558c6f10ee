// CIFAR-10's binary version (Krizhevsky 2009): 10 classes of 32x32 colour images, 50000 train in
// five files, 10000 test.
#include <filesystem>
#include <string>
#include <system_error>

#include "core/error.h"
#include "core/input_file.h"
#include "models/data/image_dataset.h"

namespace pw::models::data {
namespace {

constexpr int kClasses = 10;
constexpr std::int64_t kPixels = 32 * 32;
constexpr std::int64_t kRecord = 1 + 3 * kPixels;
constexpr std::int64_t kRecordsPerFile = 10000;   // every batch file of the data set holds 10000 records

std::vector<std::string> files_of(const std::string& dir, Split split) {
  if (split == Split::Test) return {(std::filesystem::path(dir) / "test_batch.bin").string()};
  std::vector<std::string> files;
  for (int i = 1; i <= 5; ++i) files.push_back((std::filesystem::path(dir) / ("data_batch_" + std::to_string(i) + ".bin")).string());
  return files;
}

class Cifar10 final : public Dataset {
 public:
  Cifar10(const std::string& dir, Split split, DataParts parts, const Normalization& n) {
    if (parts != DataParts::None)
      for (const auto& file : files_of(dir, split)) append(file);
    for (int c = 0; c < 3; ++c)
      for (int v = 0; v < 256; ++v) table_[c][v] = (static_cast<float>(v) / 255.0f - n.mean[c]) / n.std[c];
  }

  std::int64_t size() const override { return static_cast<std::int64_t>(records_.size()) / kRecord; }
  kernels::Shape sample_shape() const override { return {3, 32, 32}; }
  int num_classes() const override { return kClasses; }
  std::string name() const override { return "cifar10"; }

  void fill(std::int64_t index, float* image_out, std::int64_t& label_out) const override {
    const std::uint8_t* r = record(index);
    for (std::int64_t i = 0; i < 3 * kPixels; ++i) image_out[i] = table_[i / kPixels][r[1 + i]];
    label_out = r[0];
  }
  std::int64_t fill_label(std::int64_t index) const override { return record(index)[0]; }

 private:
  void append(const std::string& file) {
    std::error_code ec;
    PW_INPUT_CHECK(std::filesystem::exists(file, ec), "cannot open '" << file << "'; expected CIFAR-10's binary version (data_batch_1.bin ... "
                                                        "data_batch_5.bin, test_batch.bin) in that folder");
    // A FIFO, a device (a link to /dev/zero) or a folder is refused before a byte is read, and so
    // is a file larger than a batch file can be (a sparse 6 GB file is never read).
    const std::vector<std::uint8_t> bytes =
        read_whole_bytes(file, "CIFAR-10 batch file", kRecordsPerFile * kRecord,
                         std::to_string(kRecordsPerFile) + " records of " + std::to_string(kRecord) +
                             " bytes; expected CIFAR-10's binary version: data_batch_1.bin ... data_batch_5.bin, test_batch.bin");
    const auto size = static_cast<std::int64_t>(bytes.size());
    PW_INPUT_CHECK(size > 0 && size % kRecord == 0, "'" << file << "' holds " << size << " bytes, not a whole number of "
                                                        << kRecord << "-byte CIFAR-10 records (a label byte and 3x32x32 pixels)");
    for (std::int64_t r = 0; r < size; r += kRecord)
      PW_INPUT_CHECK(bytes[static_cast<std::size_t>(r)] < kClasses, "'" << file << "' record " << r / kRecord << " has label "
                                                                        << int{bytes[static_cast<std::size_t>(r)]}
                                                                        << "; expected 0.." << kClasses - 1);
    records_.insert(records_.end(), bytes.begin(), bytes.end());
  }

  const std::uint8_t* record(std::int64_t index) const {
    PW_CHECK(index >= 0 && index < size(), "sample " << index << " outside the " << size() << " CIFAR-10 samples read here");
    return records_.data() + index * kRecord;
  }

  std::vector<std::uint8_t> records_;
  float table_[3][256] = {};
};

}  // namespace

std::unique_ptr<Dataset> open_cifar10(const std::string& dir, Split split, DataParts parts, const Normalization& n) {
  return std::make_unique<Cifar10>(dir, split, parts, n);
}

}  // namespace pw::models::data
