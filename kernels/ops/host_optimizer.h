#pragma once
// Dense optimizer updates on host tensors (on CPU devices, or Tensor::empty_host) through the
// vectorised paths of kernels/cpu/vector_optimizer.h: F32 tensors are split over the threads of the
// parameter's CPU device and updated with `isa`; other dtypes take the reference
// (kernels/ops/optimizer.h). Every path gives the reference's bits.
#include "kernels/cpu/vector_optimizer.h"
#include "kernels/ops/optimizer.h"

namespace pw::kernels {

using cpu::VectorIsa;

void host_sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p, std::int64_t step,
                     VectorIsa isa = cpu::best_vector_isa());
void host_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p, std::int64_t step,
                      VectorIsa isa = cpu::best_vector_isa());
void host_adagrad_update(Tensor& param, const Tensor& grad, Tensor& sum_sq, const AdagradParams& p,
                         VectorIsa isa = cpu::best_vector_isa());

// Mixed precision with host masters: the F32 host values of `master` rounded into `weights`, a
// BF16 or F16 host tensor (or one of a CPU device) of as many elements, to nearest even as
// kernels::cast rounds, so the 16-bit weights are those a device-side rounding makes.
void host_round(const Tensor& master, Tensor& weights);

}  // namespace pw::kernels
