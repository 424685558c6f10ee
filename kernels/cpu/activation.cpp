// ReLU on the CPU with oneTBB.
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
      for (std::int64_t i = begin; i < end; ++i) out[i] = in[i] > T(0) ? in[i] : T(0);
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
      for (std::int64_t i = begin; i < end; ++i) gx[i] = ys[i] > T(0) ? gy[i] : T(0);
    });
    return grad_x;
  });
}

}  // namespace pw::kernels::cpu
