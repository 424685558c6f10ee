// Batch normalisation on the CPU: F32 training with own vectorisable loops (also over BF16/F16
// activations, with F32 statistics and parameters), F32 and BF16 evaluation with oneDNN, reference
// loops for F64. F16 evaluation is run as F32 by the op layer.
#include <bit>
#include <cmath>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/dnnl_context.h"
#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {

namespace {

using dnnl::memory;

// [N, C, H, W] or [N, C] seen as N x C x S with S = H*W (S = 1 for 2-D inputs).
struct BnLayout {
  std::int64_t n, c, s;
  std::int64_t per_channel() const { return n * s; }
  std::int64_t at(std::int64_t in, std::int64_t ic, std::int64_t is) const { return (in * c + ic) * s + is; }
};

BnLayout layout_of(const Tensor& x) {
  const std::int64_t s = x.ndim() == 4 ? x.dim(2) * x.dim(3) : 1;
  return {x.dim(0), x.dim(1), s};
}

// running = (1 - momentum) * running + momentum * batch, with the unbiased batch variance.
template <typename T>
void update_running_stats(const BnLayout& l, const T* mean, const T* biased_var, Tensor& running_mean,
                          Tensor& running_var, double momentum) {
  const double m = static_cast<double>(l.per_channel());
  const T keep = static_cast<T>(1.0 - momentum);
  const T take = static_cast<T>(momentum);
  const T unbias = static_cast<T>(m / (m - 1.0));
  T* rm = running_mean.data<T>();
  T* rv = running_var.data<T>();
  for (std::int64_t c = 0; c < l.c; ++c) {
    rm[c] = keep * rm[c] + take * mean[c];
    rv[c] = keep * rv[c] + take * (biased_var[c] * unbias);
  }
}

// ---- F32: oneDNN for evaluation, own per-channel loops for training ----
//
// Training batch norm runs on plain NCHW tensors between convolutions. oneDNN 2.6 only has its
// generic ncsp kernel for that layout (its jit kernels want blocked layouts, which would cost two
// extra reorders per call), so training uses these loops: one task per channel (fixed order, so
// bitwise repeatable), each plane summed in 16 float lanes and the planes combined in double.

constexpr std::int64_t kLanes = 16;

// Sum over the n planes of channel c of f(i) for each element offset i, accumulated as above.
template <typename F>
double channel_sum(const BnLayout& l, std::int64_t c, const F& f) {
  double total = 0.0;
  for (std::int64_t n = 0; n < l.n; ++n) {
    const std::int64_t base = l.at(n, c, 0);
    float lanes[kLanes] = {};
    std::int64_t s = 0;
    for (; s + kLanes <= l.s; s += kLanes)
      for (std::int64_t j = 0; j < kLanes; ++j) lanes[j] += f(base + s + j);
    float tail = 0.0f;
    for (; s < l.s; ++s) tail += f(base + s);
    float plane = tail;
    for (std::int64_t j = 0; j < kLanes; ++j) plane += lanes[j];
    total += plane;
  }
  return total;
}

// S is the activations' storage (float, Bf16, F16); statistics, parameters and sums are float.
template <typename S>
Tensor forward_train_f32(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                         Tensor& running_var, Tensor& save_mean, Tensor& save_invstd, const BatchNormParams& p) {
  const BnLayout l = layout_of(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  std::vector<float> biased_var(static_cast<std::size_t>(l.c));
  const S* xs = x.data<S>();
  S* ys = y.data<S>();
  const float* g = gamma.data<float>();
  const float* b = beta.data<float>();
  float* mean_out = save_mean.data<float>();
  float* invstd_out = save_invstd.data<float>();
  const double count = static_cast<double>(l.per_channel());
  parallel_chunks(l.c, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      const float mean = static_cast<float>(channel_sum(l, c, [&](std::int64_t i) { return load(xs[i]); }) / count);
      const double var = channel_sum(l, c, [&](std::int64_t i) {
                           const float d = load(xs[i]) - mean;
                           return d * d;
                         }) / count;
      const double invstd = 1.0 / std::sqrt(var + p.eps);
      const float scale = static_cast<float>(g[c] * invstd);
      const float shift = b[c] - mean * scale;
      for (std::int64_t n = 0; n < l.n; ++n) {
        const S* in = xs + l.at(n, c, 0);
        S* out = ys + l.at(n, c, 0);
        for (std::int64_t s = 0; s < l.s; ++s) out[s] = store<S>(load(in[s]) * scale + shift);
      }
      mean_out[c] = mean;
      invstd_out[c] = static_cast<float>(invstd);
      biased_var[static_cast<std::size_t>(c)] = static_cast<float>(var);
    }
  });
  update_running_stats(l, mean_out, biased_var.data(), running_mean, running_var, p.momentum);
  return y;
}

template <typename S>
BatchNormGrads backward_f32(const Tensor& x, const Tensor& grad_y, const Tensor& gamma, const Tensor& save_mean,
                            const Tensor& save_invstd) {
  const BnLayout l = layout_of(x);
  BatchNormGrads grads{Tensor::empty(x.shape(), x.dtype(), x.device()),
                       Tensor::empty({l.c}, DType::F32, x.device()), Tensor::empty({l.c}, DType::F32, x.device())};
  const S* xs = x.data<S>();
  const S* gy = grad_y.data<S>();
  S* gx = grads.grad_x.data<S>();
  const float* g = gamma.data<float>();
  const float* means = save_mean.data<float>();
  const float* invstds = save_invstd.data<float>();
  float* grad_gamma = grads.grad_gamma.data<float>();
  float* grad_beta = grads.grad_beta.data<float>();
  const double count = static_cast<double>(l.per_channel());
  parallel_chunks(l.c, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      const float mean = means[c], invstd = invstds[c];
      const double sum_dy = channel_sum(l, c, [&](std::int64_t i) { return load(gy[i]); });
      // sum(dy * xhat) = invstd * sum(dy * (x - mean))
      const double sum_dy_xhat =
          channel_sum(l, c, [&](std::int64_t i) { return load(gy[i]) * (load(xs[i]) - mean); }) *
          static_cast<double>(invstd);
      // gx = gamma * invstd * (dy - sum_dy / m - xhat * sum_dy_xhat / m)
      //    = a * dy + b * (x - mean) + d
      const double k = static_cast<double>(g[c]) * invstd;
      const float a = static_cast<float>(k);
      const float bx = static_cast<float>(-k * invstd * sum_dy_xhat / count);
      const float d = static_cast<float>(-k * sum_dy / count);
      for (std::int64_t n = 0; n < l.n; ++n) {
        const std::int64_t base = l.at(n, c, 0);
        const S* dy = gy + base;
        const S* in = xs + base;
        S* out = gx + base;
        for (std::int64_t s = 0; s < l.s; ++s) out[s] = store<S>(a * load(dy[s]) + bx * (load(in[s]) - mean) + d);
      }
      grad_gamma[c] = static_cast<float>(sum_dy_xhat);
      grad_beta[c] = static_cast<float>(sum_dy);
    }
  });
  return grads;
}

// Evaluation keeps oneDNN (no statistics to gather: one streaming pass), F32 or BF16 data with F32
// statistics and parameters.
memory::desc data_desc(const BnLayout& l, DType dtype) {
  return plain_desc({l.n, l.c, l.s, 1}, dtype);
}

PrimitiveKey bn_key(const BnLayout& l, double eps, DType dtype) {
  return {l.n, l.c, l.s, static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(static_cast<float>(eps))),
          static_cast<std::int64_t>(dtype)};
}

const auto kScaleShift = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

struct CachedPrimitive {
  dnnl::primitive primitive;
  memory::desc scratchpad;
};

Tensor forward_eval_dnnl(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                         const Tensor& running_var, const BatchNormParams& p) {
  static PrimitiveCache<CachedPrimitive> cache;
  const BnLayout l = layout_of(x);
  const auto& entry = cache.get(bn_key(l, p.eps, x.dtype()), [&] {
    const dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_inference, data_desc(l, x.dtype()),
                                                       static_cast<float>(p.eps),
                                                       kScaleShift | dnnl::normalization_flags::use_global_stats);
    const dnnl::batch_normalization_forward::primitive_desc pd(desc, user_scratchpad_attr(), dnnl_engine());
    return CachedPrimitive{dnnl::batch_normalization_forward(pd), pd.scratchpad_desc()};
  });
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const memory::desc data = data_desc(l, x.dtype());
  execute(entry.primitive, entry.scratchpad,
          {{DNNL_ARG_SRC, wrap(x, data)},
           {DNNL_ARG_DST, wrap(y, data)},
           {DNNL_ARG_SCALE, wrap(gamma)},
           {DNNL_ARG_SHIFT, wrap(beta)},
           {DNNL_ARG_MEAN, wrap(running_mean)},
           {DNNL_ARG_VARIANCE, wrap(running_var)}});
  return y;
}

// ---- reference loops (F64) ----

template <typename T>
Tensor forward_train_reference(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                               Tensor& running_var, Tensor& save_mean, Tensor& save_invstd,
                               const BatchNormParams& p) {
  const BnLayout l = layout_of(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  std::vector<T> biased_var(static_cast<std::size_t>(l.c));
  const T* xs = x.data<T>();
  T* ys = y.data<T>();
  parallel_chunks(l.c, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      T total = 0;
      for (std::int64_t n = 0; n < l.n; ++n)
        for (std::int64_t s = 0; s < l.s; ++s) total += xs[l.at(n, c, s)];
      const T mean = total / static_cast<T>(l.per_channel());
      T squares = 0;
      for (std::int64_t n = 0; n < l.n; ++n)
        for (std::int64_t s = 0; s < l.s; ++s) squares += (xs[l.at(n, c, s)] - mean) * (xs[l.at(n, c, s)] - mean);
      const T var = squares / static_cast<T>(l.per_channel());
      const T invstd = T(1) / std::sqrt(var + static_cast<T>(p.eps));
      const T g = gamma.data<T>()[c], b = beta.data<T>()[c];
      for (std::int64_t n = 0; n < l.n; ++n)
        for (std::int64_t s = 0; s < l.s; ++s) ys[l.at(n, c, s)] = (xs[l.at(n, c, s)] - mean) * invstd * g + b;
      save_mean.data<T>()[c] = mean;
      save_invstd.data<T>()[c] = invstd;
      biased_var[static_cast<std::size_t>(c)] = var;
    }
  });
  update_running_stats(l, save_mean.data<T>(), biased_var.data(), running_mean, running_var, p.momentum);
  return y;
}

template <typename T>
Tensor forward_eval_reference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                              const Tensor& running_var, const BatchNormParams& p) {
  const BnLayout l = layout_of(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const T* xs = x.data<T>();
  T* ys = y.data<T>();
  parallel_chunks(l.c, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      const T invstd = T(1) / std::sqrt(running_var.data<T>()[c] + static_cast<T>(p.eps));
      const T mean = running_mean.data<T>()[c], g = gamma.data<T>()[c], b = beta.data<T>()[c];
      for (std::int64_t n = 0; n < l.n; ++n)
        for (std::int64_t s = 0; s < l.s; ++s) ys[l.at(n, c, s)] = (xs[l.at(n, c, s)] - mean) * invstd * g + b;
    }
  });
  return y;
}

template <typename T>
BatchNormGrads backward_reference(const Tensor& x, const Tensor& grad_y, const Tensor& gamma, const Tensor& save_mean,
                                  const Tensor& save_invstd) {
  const BnLayout l = layout_of(x);
  BatchNormGrads grads{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty({l.c}, x.dtype(), x.device()),
                       Tensor::empty({l.c}, x.dtype(), x.device())};
  const T* xs = x.data<T>();
  const T* gy = grad_y.data<T>();
  T* gx = grads.grad_x.data<T>();
  parallel_chunks(l.c, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      const T mean = save_mean.data<T>()[c], invstd = save_invstd.data<T>()[c];
      T sum_dy = 0, sum_dy_xhat = 0;
      for (std::int64_t n = 0; n < l.n; ++n) {
        for (std::int64_t s = 0; s < l.s; ++s) {
          const std::int64_t i = l.at(n, c, s);
          sum_dy += gy[i];
          sum_dy_xhat += gy[i] * (xs[i] - mean) * invstd;
        }
      }
      const T m = static_cast<T>(l.per_channel());
      const T k = gamma.data<T>()[c] * invstd / m;
      for (std::int64_t n = 0; n < l.n; ++n) {
        for (std::int64_t s = 0; s < l.s; ++s) {
          const std::int64_t i = l.at(n, c, s);
          gx[i] = k * (m * gy[i] - sum_dy - (xs[i] - mean) * invstd * sum_dy_xhat);
        }
      }
      grads.grad_gamma.data<T>()[c] = sum_dy_xhat;
      grads.grad_beta.data<T>()[c] = sum_dy;
    }
  });
  return grads;
}

}  // namespace

Tensor batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                Tensor& running_var, Tensor& save_mean, Tensor& save_invstd,
                                const BatchNormParams& p) {
  return visit_any_float(x.dtype(), "batch_norm_forward_train", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>)
      return forward_train_f32<T>(x, gamma, beta, running_mean, running_var, save_mean, save_invstd, p);
    else
      return forward_train_reference<T>(x, gamma, beta, running_mean, running_var, save_mean, save_invstd, p);
  });
}

Tensor batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, const BatchNormParams& p) {
  if (x.dtype() == DType::BF16) return forward_eval_dnnl(x, gamma, beta, running_mean, running_var, p);
  return visit_float(x.dtype(), "batch_norm_forward_eval", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) return forward_eval_dnnl(x, gamma, beta, running_mean, running_var, p);
    else return forward_eval_reference<T>(x, gamma, beta, running_mean, running_var, p);
  });
}

BatchNormGrads batch_norm_backward(const Tensor& x, const Tensor& grad_y, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd, const BatchNormParams& p) {
  return visit_any_float(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) return backward_f32<T>(x, grad_y, gamma, save_mean, save_invstd);
    else return backward_reference<T>(x, grad_y, gamma, save_mean, save_invstd);
  });
}

}  // namespace pw::kernels::cpu
