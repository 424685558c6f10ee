#pragma once
// CRC-32C (Castagnoli), as TFRecord framing checksums its lengths and payloads, and the masked
// form TensorFlow stores (a CRC of data that itself holds CRCs is then not a fixed point).
#include <cstddef>
#include <cstdint>
#include <span>

namespace pw::monitor {

std::uint32_t crc32c(std::span<const std::byte> data);
std::uint32_t masked_crc32c(std::span<const std::byte> data);

}  // namespace pw::monitor
