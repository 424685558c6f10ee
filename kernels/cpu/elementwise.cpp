// Element-wise arithmetic and reductions on the CPU (parallel loops on OpenMP, see parallel.h).
// The reductions accumulate in double with fixed chunking, so a loss or a gradient norm is bitwise
// repeatable.
#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {

Tensor add(const Tensor& a, const Tensor& b) {
  return visit_float(a.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    Tensor c = Tensor::empty(a.shape(), a.dtype(), a.device());
    const T* as = a.data<T>();
    const T* bs = b.data<T>();
    T* cs = c.data<T>();
    parallel_chunks(a.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      const T* __restrict x = as;
      const T* __restrict y = bs;
      T* __restrict z = cs;
      for (std::int64_t i = begin; i < end; ++i) z[i] = x[i] + y[i];
    });
    return c;
  });
}

void add_inplace(Tensor& dst, const Tensor& src, double alpha) {
  visit_float(dst.dtype(), "add_inplace", [&](auto tag) {
    using T = decltype(tag);
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    const T a = static_cast<T>(alpha);
    parallel_chunks(dst.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      T* __restrict out = d;
      const T* __restrict in = s;
      for (std::int64_t i = begin; i < end; ++i) out[i] += a * in[i];
    });
  });
}

void scale_inplace(Tensor& t, double alpha) {
  visit_float(t.dtype(), "scale_inplace", [&](auto tag) {
    using T = decltype(tag);
    T* d = t.data<T>();
    const T a = static_cast<T>(alpha);
    parallel_chunks(t.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      T* __restrict out = d;
      for (std::int64_t i = begin; i < end; ++i) out[i] *= a;
    });
  });
}

double sum(const Tensor& t) {
  return visit_float(t.dtype(), "sum", [&](auto tag) {
    const auto* d = t.data<decltype(tag)>();
    return deterministic_sum(t.numel(), [d](std::int64_t i) { return static_cast<double>(d[i]); });
  });
}

double sum_of_squares(const Tensor& t) {
  return visit_float(t.dtype(), "sum_of_squares", [&](auto tag) {
    const auto* d = t.data<decltype(tag)>();
    return deterministic_sum(t.numel(), [d](std::int64_t i) {
      const double v = d[i];
      return v * v;
    });
  });
}

}  // namespace pw::kernels::cpu
