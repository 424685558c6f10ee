#pragma once
// Reader for IDX files, the format of MNIST and Fashion-MNIST: a big-endian magic number
// (0x00000803 for images: unsigned bytes in 3 dimensions; 0x00000801 for labels: 1 dimension),
// the dimensions as big-endian uint32, then the bytes. Files may be gzip-compressed or plain.
// Every problem with a file (missing, wrong magic, truncated) is a pw::InputError naming the file.
#include <cstdint>
#include <string>
#include <vector>

namespace pw::models::data {

struct IdxImages {
  std::int64_t count = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<std::uint8_t> pixels;   // count * rows * cols, row-major
};

struct IdxLabels {
  std::vector<std::uint8_t> labels;
};

inline constexpr std::uint32_t kIdxImagesMagic = 0x00000803;
inline constexpr std::uint32_t kIdxLabelsMagic = 0x00000801;

IdxImages read_idx_images(const std::string& path);
IdxLabels read_idx_labels(const std::string& path);

}  // namespace pw::models::data
