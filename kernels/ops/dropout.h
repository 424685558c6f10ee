#pragma once
// Inverted dropout. The keep-mask comes from a counter-based hash of (seed, element index), so
// the CPU and CUDA paths draw the same mask for the same seed.
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
