#include "train/monitor/crc32c.h"

#include <array>

namespace pw::monitor {
namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u;   // the Castagnoli polynomial, bits reversed
constexpr std::uint32_t kMaskDelta = 0xA282EAD8u;

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr auto kTable = make_table();

}  // namespace

std::uint32_t crc32c(std::span<const std::byte> data) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (const std::byte b : data) c = kTable[(c ^ static_cast<std::uint32_t>(b)) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(std::span<const std::byte> data) {
  const std::uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + kMaskDelta;
}

}  // namespace pw::monitor
