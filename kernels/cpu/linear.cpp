// Matrix products on the CPU: oneDNN matmul for F32 and BF16 (transposes as strided views,
// accumulation as a sum post-op; BF16 products accumulate in F32 and may write an F32 result, as the
// weight gradients are), reference loops for F64.
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/dnnl_context.h"
#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {

namespace {

using dnnl::memory;

enum class Accumulate { No, Yes };   // Yes: c += op(a) * op(b)

// Rows and columns of op(t) for a 2-D tensor t.
std::int64_t op_rows(const Tensor& t, Transpose tr) { return tr == Transpose::No ? t.dim(0) : t.dim(1); }
std::int64_t op_cols(const Tensor& t, Transpose tr) { return tr == Transpose::No ? t.dim(1) : t.dim(0); }

// A row-major [rows, cols] matrix, or the transpose of a row-major [cols, rows] one.
memory::desc matrix_desc(std::int64_t rows, std::int64_t cols, Transpose tr, DType dtype) {
  const memory::dims strides = tr == Transpose::No ? memory::dims{cols, 1} : memory::dims{1, rows};
  return {{rows, cols}, dnnl_data_type(dtype, "matmul"), strides};
}

struct CachedMatmul {
  dnnl::primitive primitive;
  memory::desc scratchpad;
};

// c[M, N] (+)= op(a) * op(b) (+ bias[N] broadcast over rows).
void matmul_dnnl(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& bias, Tensor& c,
                 Accumulate acc) {
  static PrimitiveCache<CachedMatmul> cache;
  const std::int64_t m = op_rows(a, ta), k = op_cols(a, ta), n = op_cols(b, tb);
  const memory::desc a_desc = matrix_desc(m, k, ta, a.dtype()), b_desc = matrix_desc(k, n, tb, b.dtype());
  const memory::desc c_desc = matrix_desc(m, n, Transpose::No, c.dtype());
  const memory::desc bias_desc = matrix_desc(1, n, Transpose::No, bias.defined() ? bias.dtype() : DType::F32);
  const PrimitiveKey key = {m, k, n, static_cast<std::int64_t>(ta), static_cast<std::int64_t>(tb),
                            bias.defined() ? 1 : 0, static_cast<std::int64_t>(acc), static_cast<std::int64_t>(a.dtype()),
                            static_cast<std::int64_t>(c.dtype())};
  const auto& entry = cache.get(key, [&] {
    const dnnl::matmul::desc desc =
        bias.defined() ? dnnl::matmul::desc(a_desc, b_desc, bias_desc, c_desc) : dnnl::matmul::desc(a_desc, b_desc, c_desc);
    dnnl::primitive_attr attr = user_scratchpad_attr();
    if (acc == Accumulate::Yes) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(desc, attr, dnnl_engine());
    return CachedMatmul{dnnl::matmul(pd), pd.scratchpad_desc()};
  });
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, wrap(a, a_desc)}, {DNNL_ARG_WEIGHTS, wrap(b, b_desc)}, {DNNL_ARG_DST, wrap(c, c_desc)}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, wrap(bias, bias_desc));
  execute(entry.primitive, entry.scratchpad, std::move(args));
}

// ---- reference loops (F64) ----

template <typename T>
void matmul_reference(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& bias, Tensor& c,
                      Accumulate acc) {
  const std::int64_t m = op_rows(a, ta), k = op_cols(a, ta), n = op_cols(b, tb);
  const T* as = a.data<T>();
  const T* bs = b.data<T>();
  T* cs = c.data<T>();
  auto a_at = [&](std::int64_t i, std::int64_t p) { return ta == Transpose::No ? as[i * k + p] : as[p * m + i]; };
  auto b_at = [&](std::int64_t p, std::int64_t j) { return tb == Transpose::No ? bs[p * n + j] : bs[j * k + p]; };
  parallel_chunks(m, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        T total = bias.defined() ? bias.data<T>()[j] : T(0);
        for (std::int64_t p = 0; p < k; ++p) total += a_at(i, p) * b_at(p, j);
        cs[i * n + j] = acc == Accumulate::Yes ? cs[i * n + j] + total : total;
      }
    }
  });
}

template <typename T>
void product(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& bias, Tensor& c,
             Accumulate acc) {
  if constexpr (std::is_same_v<T, double>) matmul_reference<T>(a, ta, b, tb, bias, c, acc);
  else matmul_dnnl(a, ta, b, tb, bias, c, acc);
}

// grad_bias[j] += sum over rows of grad_y[:, j]; each column is summed by one task, in row order
// (in the compute type: float for F32 and BF16 gradients, double for F64).
template <typename T>
void accumulate_column_sums(const Tensor& grad_y, Tensor& grad_bias) {
  using C = compute_t<T>;
  const std::int64_t rows = grad_y.dim(0), cols = grad_y.dim(1);
  const T* gy = grad_y.data<T>();
  C* gb = grad_bias.data<C>();
  parallel_chunks(cols, 64, [&](std::int64_t begin, std::int64_t end) {
    std::vector<C> totals(static_cast<std::size_t>(end - begin), C(0));
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = begin; j < end; ++j) totals[static_cast<std::size_t>(j - begin)] += load(gy[i * cols + j]);
    for (std::int64_t j = begin; j < end; ++j) gb[j] += totals[static_cast<std::size_t>(j - begin)];
  });
}

// F32 and F64 as visit_float, and BF16 (oneDNN's BF16 matmul); F16 is run as F32 by the op layer.
template <typename Body>
decltype(auto) visit_matmul_type(DType dtype, const char* op, Body&& body) {
  if (dtype == DType::BF16) return body(Bf16{});
  return visit_float(dtype, op, std::forward<Body>(body));
}

}  // namespace

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias) {
  return visit_matmul_type(x.dtype(), "linear_forward", [&](auto tag) {
    Tensor y = Tensor::empty({x.dim(0), w.dim(0)}, x.dtype(), x.device());
    product<decltype(tag)>(x, Transpose::No, w, Transpose::Yes, bias, y, Accumulate::No);
    return y;
  });
}

Tensor linear_backward_data(const Tensor& grad_y, const Tensor& w) {
  return visit_matmul_type(grad_y.dtype(), "linear_backward_data", [&](auto tag) {
    Tensor grad_x = Tensor::empty({grad_y.dim(0), w.dim(1)}, grad_y.dtype(), grad_y.device());
    product<decltype(tag)>(grad_y, Transpose::No, w, Transpose::No, Tensor(), grad_x, Accumulate::No);
    return grad_x;
  });
}

void linear_backward_weight(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias) {
  visit_matmul_type(x.dtype(), "linear_backward_weight", [&](auto tag) {
    using T = decltype(tag);
    product<T>(grad_y, Transpose::Yes, x, Transpose::No, Tensor(), grad_w, Accumulate::Yes);
    if (grad_bias.defined()) accumulate_column_sums<T>(grad_y, grad_bias);
  });
}

Tensor matmul(const Tensor& a, const Tensor& b, Transpose ta, Transpose tb) {
  return visit_matmul_type(a.dtype(), "matmul", [&](auto tag) {
    Tensor c = Tensor::empty({op_rows(a, ta), op_cols(b, tb)}, a.dtype(), a.device());
    product<decltype(tag)>(a, ta, b, tb, Tensor(), c, Accumulate::No);
    return c;
  });
}

}  // namespace pw::kernels::cpu
