// Element-wise arithmetic and reductions on the CPU (parallel loops on OpenMP, see parallel.h), for
// every floating dtype (BF16 and F16 computed in float, rounded once per result). The reductions
// accumulate in double with fixed chunking, so a loss or a gradient norm is bitwise repeatable.
#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {

Tensor add(const Tensor& a, const Tensor& b) {
  return visit_any_float(a.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    Tensor c = Tensor::empty(a.shape(), a.dtype(), a.device());
    const T* as = a.data<T>();
    const T* bs = b.data<T>();
    T* cs = c.data<T>();
    parallel_chunks(a.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      const T* __restrict x = as;
      const T* __restrict y = bs;
      T* __restrict z = cs;
      for (std::int64_t i = begin; i < end; ++i) z[i] = store<T>(load(x[i]) + load(y[i]));
    });
    return c;
  });
}

void add_inplace(Tensor& dst, const Tensor& src, double alpha) {
  visit_any_float(dst.dtype(), "add_inplace", [&](auto tag) {
    using T = decltype(tag);
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    const compute_t<T> a = static_cast<compute_t<T>>(alpha);
    parallel_chunks(dst.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      T* __restrict out = d;
      const T* __restrict in = s;
      for (std::int64_t i = begin; i < end; ++i) out[i] = store<T>(load(out[i]) + a * load(in[i]));
    });
  });
}

void scale_inplace(Tensor& t, double alpha) {
  visit_any_float(t.dtype(), "scale_inplace", [&](auto tag) {
    using T = decltype(tag);
    T* d = t.data<T>();
    const compute_t<T> a = static_cast<compute_t<T>>(alpha);
    parallel_chunks(t.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      T* __restrict out = d;
      for (std::int64_t i = begin; i < end; ++i) out[i] = store<T>(load(out[i]) * a);
    });
  });
}

double sum(const Tensor& t) {
  return visit_any_float(t.dtype(), "sum", [&](auto tag) {
    const auto* d = t.data<decltype(tag)>();
    return deterministic_sum(t.numel(), [d](std::int64_t i) { return static_cast<double>(load(d[i])); });
  });
}

double sum_of_squares(const Tensor& t) {
  return visit_any_float(t.dtype(), "sum_of_squares", [&](auto tag) {
    const auto* d = t.data<decltype(tag)>();
    return deterministic_sum(t.numel(), [d](std::int64_t i) {
      const double v = load(d[i]);
      return v * v;
    });
  });
}

std::vector<double> sums_of_squares(const std::vector<Tensor>& ts) {
  std::vector<double> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(cpu::sum_of_squares(t));
  return out;
}

}  // namespace pw::kernels::cpu
