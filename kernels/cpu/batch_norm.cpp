// Batch normalisation on the CPU: oneDNN for F32, reference loops for F64.
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

// ---- oneDNN (F32) ----

memory::desc data_desc(const BnLayout& l) {
  return plain_f32_desc({l.n, l.c, l.s, 1});
}

PrimitiveKey bn_key(const BnLayout& l, double eps) {
  return {l.n, l.c, l.s, static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(static_cast<float>(eps)))};
}

const auto kScaleShift = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

dnnl::batch_normalization_forward::primitive_desc forward_pd(const BnLayout& l, double eps, dnnl::prop_kind kind,
                                                             dnnl::normalization_flags flags) {
  const dnnl::batch_normalization_forward::desc desc(kind, data_desc(l), static_cast<float>(eps), flags);
  return {desc, user_scratchpad_attr(), dnnl_engine()};
}

struct CachedPrimitive {
  dnnl::primitive primitive;
  memory::desc scratchpad;
};

Tensor forward_train_dnnl(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                          Tensor& running_var, Tensor& save_mean, Tensor& save_invstd, const BatchNormParams& p) {
  static PrimitiveCache<CachedPrimitive> cache;
  const BnLayout l = layout_of(x);
  const auto& entry = cache.get(bn_key(l, p.eps), [&] {
    auto pd = forward_pd(l, p.eps, dnnl::prop_kind::forward_training, kScaleShift);
    return CachedPrimitive{dnnl::batch_normalization_forward(pd), pd.scratchpad_desc()};
  });
  Tensor y = Tensor::empty(x.shape(), DType::F32, x.device());
  Tensor variance = Tensor::empty({l.c}, DType::F32, x.device());
  const memory::desc data = data_desc(l);
  execute(entry.primitive, entry.scratchpad,
          {{DNNL_ARG_SRC, wrap(x, data)},
           {DNNL_ARG_DST, wrap(y, data)},
           {DNNL_ARG_SCALE, wrap(gamma)},
           {DNNL_ARG_SHIFT, wrap(beta)},
           {DNNL_ARG_MEAN, wrap(save_mean)},
           {DNNL_ARG_VARIANCE, wrap(variance)}});
  const float* var = variance.data<float>();
  float* invstd = save_invstd.data<float>();
  for (std::int64_t c = 0; c < l.c; ++c) invstd[c] = static_cast<float>(1.0 / std::sqrt(double{var[c]} + p.eps));
  update_running_stats(l, save_mean.data<float>(), var, running_mean, running_var, p.momentum);
  return y;
}

Tensor forward_eval_dnnl(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                         const Tensor& running_var, const BatchNormParams& p) {
  static PrimitiveCache<CachedPrimitive> cache;
  const BnLayout l = layout_of(x);
  const auto& entry = cache.get(bn_key(l, p.eps), [&] {
    auto pd = forward_pd(l, p.eps, dnnl::prop_kind::forward_inference,
                         kScaleShift | dnnl::normalization_flags::use_global_stats);
    return CachedPrimitive{dnnl::batch_normalization_forward(pd), pd.scratchpad_desc()};
  });
  Tensor y = Tensor::empty(x.shape(), DType::F32, x.device());
  const memory::desc data = data_desc(l);
  execute(entry.primitive, entry.scratchpad,
          {{DNNL_ARG_SRC, wrap(x, data)},
           {DNNL_ARG_DST, wrap(y, data)},
           {DNNL_ARG_SCALE, wrap(gamma)},
           {DNNL_ARG_SHIFT, wrap(beta)},
           {DNNL_ARG_MEAN, wrap(running_mean)},
           {DNNL_ARG_VARIANCE, wrap(running_var)}});
  return y;
}

BatchNormGrads backward_dnnl(const Tensor& x, const Tensor& grad_y, const Tensor& gamma, const Tensor& save_mean,
                             const Tensor& save_invstd, const BatchNormParams& p) {
  static PrimitiveCache<CachedPrimitive> cache;
  const BnLayout l = layout_of(x);
  const memory::desc data = data_desc(l);
  // oneDNN 2.6.3 refuses to execute a backward pass built with use_scale | use_shift ("could not
  // execute a primitive"), so oneDNN computes grad_x and grad_gamma and we sum grad_beta.
  const auto flags = dnnl::normalization_flags::use_scale;
  const auto& entry = cache.get(bn_key(l, p.eps), [&] {
    const dnnl::batch_normalization_backward::desc desc(dnnl::prop_kind::backward, data, data,
                                                        static_cast<float>(p.eps), flags);
    const dnnl::batch_normalization_backward::primitive_desc pd(
        desc, user_scratchpad_attr(), dnnl_engine(), forward_pd(l, p.eps, dnnl::prop_kind::forward_training, flags));
    return CachedPrimitive{dnnl::batch_normalization_backward(pd), pd.scratchpad_desc()};
  });
  // oneDNN takes the batch variance; the contract saves 1/sqrt(var + eps). Invert in double.
  Tensor variance = Tensor::empty({l.c}, DType::F32, x.device());
  for (std::int64_t c = 0; c < l.c; ++c) {
    const double invstd = save_invstd.data<float>()[c];
    variance.data<float>()[c] = static_cast<float>(std::max(0.0, 1.0 / (invstd * invstd) - p.eps));
  }
  BatchNormGrads grads{Tensor::empty(x.shape(), DType::F32, x.device()),
                       Tensor::empty({l.c}, DType::F32, x.device()), Tensor::empty({l.c}, DType::F32, x.device())};
  execute(entry.primitive, entry.scratchpad,
          {{DNNL_ARG_SRC, wrap(x, data)},
           {DNNL_ARG_DIFF_DST, wrap(grad_y, data)},
           {DNNL_ARG_MEAN, wrap(save_mean)},
           {DNNL_ARG_VARIANCE, wrap(variance)},
           {DNNL_ARG_SCALE, wrap(gamma)},
           {DNNL_ARG_DIFF_SRC, wrap(grads.grad_x, data)},
           {DNNL_ARG_DIFF_SCALE, wrap(grads.grad_gamma)}});
  const float* gy = grad_y.data<float>();
  float* grad_beta = grads.grad_beta.data<float>();
  parallel_chunks(l.c, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      float total = 0.0f;
      for (std::int64_t n = 0; n < l.n; ++n)
        for (std::int64_t s = 0; s < l.s; ++s) total += gy[l.at(n, c, s)];
      grad_beta[c] = total;
    }
  });
  return grads;
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
  return visit_float(x.dtype(), "batch_norm_forward_train", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>)
      return forward_train_dnnl(x, gamma, beta, running_mean, running_var, save_mean, save_invstd, p);
    else
      return forward_train_reference<T>(x, gamma, beta, running_mean, running_var, save_mean, save_invstd, p);
  });
}

Tensor batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, const BatchNormParams& p) {
  return visit_float(x.dtype(), "batch_norm_forward_eval", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) return forward_eval_dnnl(x, gamma, beta, running_mean, running_var, p);
    else return forward_eval_reference<T>(x, gamma, beta, running_mean, running_var, p);
  });
}

BatchNormGrads batch_norm_backward(const Tensor& x, const Tensor& grad_y, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd, const BatchNormParams& p) {
  return visit_float(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) return backward_dnnl(x, grad_y, gamma, save_mean, save_invstd, p);
    else return backward_reference<T>(x, grad_y, gamma, save_mean, save_invstd);
  });
}

}  // namespace pw::kernels::cpu
