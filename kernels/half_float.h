#pragma once
// bfloat16 and IEEE binary16 (fp16) as 16-bit patterns, converted to and from float with
// round-to-nearest-even (what PyTorch, CUDA's __float2bfloat16_rn / __float2half_rn and oneDNN do).
// NaN stays NaN (quiet), values past the largest finite number become infinity, fp16 keeps
// subnormals. Header-only and constexpr-free so host code anywhere can use it.
#include <cstdint>
#include <cstring>

namespace pw::kernels {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float float_from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;   // ties to even; overflow carries into infinity
  const std::uint32_t quiet_nan = (u >> 16) | 0x0040u;
  // A select, not a branch, so loops over arrays vectorise.
  return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float bf16_to_float(std::uint16_t h) { return float_from_bits(static_cast<std::uint32_t>(h) << 16); }

inline std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));   // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);   // rounds past 65504: infinity
  if (a < 0x38800000u) {
    // Below the smallest normal (2^-14): a subnormal, rounded to a multiple of 2^-24 (ties to even).
    if (a < 0x33000000u) return sign;   // below half of 2^-24 (2^-25 itself rounds to even: 0)
    const std::uint32_t exponent = a >> 23;
    const std::uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;
    // value = mantissa * 2^(exponent - 150), so value / 2^-24 = mantissa >> (126 - exponent), 14 to 24 bits.
    const std::uint32_t shift = 126u - exponent;
    const std::uint32_t whole = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    const std::uint32_t rounded = whole + ((rest > half || (rest == half && (whole & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | rounded);   // 0x400 (the smallest normal) when it rounds up
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits.
  const std::uint32_t rebiased = a - 0x38000000u;   // (127 - 15) << 23
  const std::uint32_t rounding = 0xfffu + ((rebiased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rebiased + rounding) >> 13));
}

inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));   // inf, NaN
  if (exponent != 0) return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return sign != 0 ? -magnitude : magnitude;
}

}  // namespace pw::kernels
