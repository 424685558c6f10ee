#pragma once
// Inverted dropout. The keep-mask comes from a counter-based hash of (seed, element index), so
// the CPU and CUDA paths draw the same mask for the same seed. The exact rule (both backends;
// kernels/ops/dropout_mask.h has it as a host/device function):
//   i      = the element's flat row-major index (uint64)
//   z      = seed ^ (i * 0x9E3779B97F4A7C15)                 (wrapping uint64 arithmetic)
//   h      = splitmix64(z):  z += 0x9E3779B97F4A7C15;
//                            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
//                            z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//                            h = z ^ (z >> 31)
//   u      = double(h >> 11) * 2^-53                          (exact, in [0, 1))
//   kept   = u >= p                                           (p in [0, 1]; p = 0 keeps all)
//   y      = kept ? x * scale : 0,  scale = T(1.0 / (1.0 - p)) computed in double, cast to the
//            tensor's type T; scale = 0 when p = 1. Backward: grad_x = mask ? grad_y * scale : 0.
#include <cstdint>

#include "kernels/tensor.h"

namespace pw::kernels {

struct DropoutResult {
  Tensor y;
  Tensor mask;   // U8, 1 = kept
};
DropoutResult dropout_forward(const Tensor& x, double p, std::uint64_t seed);
Tensor dropout_backward(const Tensor& grad_y, const Tensor& mask, double p);

}  // namespace pw::kernels
