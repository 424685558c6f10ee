// ReLU on the CPU (parallel loops on OpenMP, see parallel.h), for every floating dtype: BF16 and
// F16 compare their bits' sign and copy them, so the result is exact in any format.
#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {
namespace {

// 16-bit floats as their bit patterns: a pattern read as int16 is > 0 exactly when the value is
// positive (sign clear, not +0). NaN patterns with the sign clear pass through and those with it set
// become 0, where the F32 loop (`x > 0 ? x : 0`) turns every NaN into 0: the two paths differ on
// NaN inputs only. Plain integer loops, which the compiler vectorises.
void relu_forward_bits(const std::uint16_t* __restrict in, std::uint16_t* __restrict out, std::int64_t begin,
                       std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) out[i] = static_cast<std::int16_t>(in[i]) > 0 ? in[i] : 0;
}

void relu_backward_bits(const std::uint16_t* __restrict y, const std::uint16_t* __restrict g,
                        std::uint16_t* __restrict out, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) {
    const std::uint16_t gi = g[i];
    out[i] = static_cast<std::int16_t>(y[i]) > 0 ? gi : 0;
  }
}

template <typename T>
constexpr bool is_16_bit = std::is_same_v<T, Bf16> || std::is_same_v<T, F16>;

}  // namespace

Tensor relu_forward(const Tensor& x) {
  return visit_any_float(x.dtype(), "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    if constexpr (is_16_bit<T>) {
      const auto* in = x.data<std::uint16_t>();
      auto* out = y.data<std::uint16_t>();
      parallel_chunks(x.numel(), kElementGrain,
                      [&](std::int64_t begin, std::int64_t end) { relu_forward_bits(in, out, begin, end); });
    } else {
      const T* in = x.data<T>();
      T* out = y.data<T>();
      parallel_chunks(x.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
        const T* __restrict src = in;
        T* __restrict dst = out;
        for (std::int64_t i = begin; i < end; ++i) dst[i] = src[i] > T(0) ? src[i] : T(0);
      });
    }
    return y;
  });
}

Tensor relu_backward(const Tensor& y, const Tensor& grad_y) {
  return visit_any_float(y.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    Tensor grad_x = Tensor::empty(y.shape(), y.dtype(), y.device());
    if constexpr (is_16_bit<T>) {
      const auto* ys = y.data<std::uint16_t>();
      const auto* gy = grad_y.data<std::uint16_t>();
      auto* gx = grad_x.data<std::uint16_t>();
      parallel_chunks(y.numel(), kElementGrain,
                      [&](std::int64_t begin, std::int64_t end) { relu_backward_bits(ys, gy, gx, begin, end); });
      return grad_x;
    } else {
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
    }
  });
}

}  // namespace pw::kernels::cpu
