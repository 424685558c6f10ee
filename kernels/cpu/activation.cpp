// ReLU on the CPU (parallel loops on OpenMP, see parallel.h).
#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {

Tensor relu_forward(const Tensor& x) {
  return visit_float(x.dtype(), "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    const T* in = x.data<T>();
    T* out = y.data<T>();
    parallel_chunks(x.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      const T* __restrict src = in;
      T* __restrict dst = out;
      for (std::int64_t i = begin; i < end; ++i) dst[i] = src[i] > T(0) ? src[i] : T(0);
    });
    return y;
  });
}

Tensor relu_backward(const Tensor& y, const Tensor& grad_y) {
  return visit_float(y.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    Tensor grad_x = Tensor::empty(y.shape(), y.dtype(), y.device());
    const T* ys = y.data<T>();
    const T* gy = grad_y.data<T>();
    T* gx = grad_x.data<T>();
    parallel_chunks(y.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      // Local restrict pointers and an unconditional load of gy keep the loop branch-free and
      // vectorised (a conditional load cannot be, and the sign of y is data-dependent).
      const T* __restrict y = ys;
      const T* __restrict g = gy;
      T* __restrict out = gx;
      for (std::int64_t i = begin; i < end; ++i) {
        const T gi = g[i];
        out[i] = y[i] > T(0) ? gi : T(0);
      }
    });
    return grad_x;
  });
}

}  // namespace pw::kernels::cpu
