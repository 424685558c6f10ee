// ReLU on the CPU (parallel loops on OpenMP, see parallel.h), for every floating dtype: BF16 and
// F16 compare their bits' sign and copy them, so the result is exact in any format.
#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {
namespace {

// x > 0 for a 16-bit float pattern: sign clear, and not +0 (NaN patterns count as positive, as
// they would not in float; relu of NaN is then NaN, the same as PyTorch's).
inline bool positive_bits(std::uint16_t bits) { return (bits & 0x8000u) == 0 && bits != 0; }

template <typename T>
inline bool positive(T v) {
  if constexpr (std::is_same_v<T, Bf16> || std::is_same_v<T, F16>) return positive_bits(v.bits);
  else return v > T(0);
}

template <typename T>
inline T zero() {
  if constexpr (std::is_same_v<T, Bf16> || std::is_same_v<T, F16>) return T{0};
  else return T(0);
}

}  // namespace

Tensor relu_forward(const Tensor& x) {
  return visit_any_float(x.dtype(), "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    const T* in = x.data<T>();
    T* out = y.data<T>();
    parallel_chunks(x.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      const T* __restrict src = in;
      T* __restrict dst = out;
      for (std::int64_t i = begin; i < end; ++i) dst[i] = positive(src[i]) ? src[i] : zero<T>();
    });
    return y;
  });
}

Tensor relu_backward(const Tensor& y, const Tensor& grad_y) {
  return visit_any_float(y.dtype(), "relu_backward", [&](auto tag) {
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
        out[i] = positive(y[i]) ? gi : zero<T>();
      }
    });
    return grad_x;
  });
}

}  // namespace pw::kernels::cpu
