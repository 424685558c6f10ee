// Inverted dropout on the CPU; the mask rule is kernels/ops/dropout_mask.h, shared with CUDA.
#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops/dropout_mask.h"

namespace pw::kernels::cpu {

DropoutResult dropout_forward(const Tensor& x, double p, std::uint64_t seed) {
  return visit_any_float(x.dtype(), "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    DropoutResult r{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty(x.shape(), DType::U8, x.device())};
    const auto scale = static_cast<compute_t<T>>(dropout_scale(p));
    const T* in = x.data<T>();
    T* out = r.y.data<T>();
    std::uint8_t* mask = r.mask.data<std::uint8_t>();
    parallel_chunks(x.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const bool kept = dropout_keeps(seed, static_cast<std::uint64_t>(i), p);
        mask[i] = kept ? 1 : 0;
        out[i] = store<T>(kept ? load(in[i]) * scale : compute_t<T>(0));
      }
    });
    return r;
  });
}

Tensor dropout_backward(const Tensor& grad_y, const Tensor& mask, double p) {
  return visit_any_float(grad_y.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    Tensor grad_x = Tensor::empty(grad_y.shape(), grad_y.dtype(), grad_y.device());
    const auto scale = static_cast<compute_t<T>>(dropout_scale(p));
    const T* gy = grad_y.data<T>();
    const std::uint8_t* keep = mask.data<std::uint8_t>();
    T* gx = grad_x.data<T>();
    parallel_chunks(grad_y.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) gx[i] = store<T>(keep[i] != 0 ? load(gy[i]) * scale : compute_t<T>(0));
    });
    return grad_x;
  });
}

}  // namespace pw::kernels::cpu
