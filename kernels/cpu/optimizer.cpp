// Dense optimizer updates on the CPU (OpenMP loops, see parallel.h), element by element in the parameter's type,
// following torch.optim's formulas and operation order. F32 tensors take the vectorised loops of
// vector_optimizer.h (the same operations in the same order, so the same bits): the loops below
// call std::sqrt, which does not vectorise while it may set errno, and ran Adam at half the speed.
#include <cmath>
#include <type_traits>

#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_optimizer.h"

namespace pw::kernels::cpu {

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p, std::int64_t step) {
  visit_float(param.dtype(), "sgd_update", [&](auto tag) {
    using T = decltype(tag);
    T* w = param.data<T>();
    const T* g = grad.data<T>();
    T* buf = p.momentum != 0.0 ? momentum_buf.data<T>() : nullptr;
    if constexpr (std::is_same_v<T, float>) {
      const auto c = sgd_step_constants(p, step);
      const VectorIsa isa = best_vector_isa();
      parallel_chunks(param.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
        sgd_update_f32(isa, w + begin, g + begin, buf != nullptr ? buf + begin : nullptr, end - begin, c);
      });
      return;
    }
    const T lr = static_cast<T>(p.lr), wd = static_cast<T>(p.weight_decay), mu = static_cast<T>(p.momentum);
    const bool first_step = step == 1;
    parallel_chunks(param.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        T d = p.weight_decay != 0.0 ? g[i] + wd * w[i] : g[i];
        if (buf != nullptr) {
          buf[i] = first_step ? d : mu * buf[i] + d;
          d = buf[i];
        }
        w[i] -= lr * d;
      }
    });
  });
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p, std::int64_t step) {
  visit_float(param.dtype(), "adam_update", [&](auto tag) {
    using T = decltype(tag);
    T* w = param.data<T>();
    const T* g = grad.data<T>();
    T* ms = m.data<T>();
    T* vs = v.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      const auto c = adam_step_constants(p, step);
      const VectorIsa isa = best_vector_isa();
      parallel_chunks(param.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
        adam_update_f32(isa, w + begin, g + begin, ms + begin, vs + begin, end - begin, c);
      });
      return;
    }
    const double bias1 = 1.0 - std::pow(p.beta1, static_cast<double>(step));
    const double bias2 = 1.0 - std::pow(p.beta2, static_cast<double>(step));
    const T step_size = static_cast<T>(p.lr / bias1);
    const T bias2_sqrt = static_cast<T>(std::sqrt(bias2));
    const T b1 = static_cast<T>(p.beta1), b2 = static_cast<T>(p.beta2);
    const T one_minus_b1 = static_cast<T>(1.0 - p.beta1), one_minus_b2 = static_cast<T>(1.0 - p.beta2);
    const T eps = static_cast<T>(p.eps), wd = static_cast<T>(p.weight_decay);
    parallel_chunks(param.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const T d = p.weight_decay != 0.0 ? g[i] + wd * w[i] : g[i];
        ms[i] = ms[i] * b1 + one_minus_b1 * d;
        vs[i] = vs[i] * b2 + one_minus_b2 * d * d;
        const T denom = std::sqrt(vs[i]) / bias2_sqrt + eps;
        w[i] -= step_size * (ms[i] / denom);
      }
    });
  });
}

void adagrad_update(Tensor& param, const Tensor& grad, Tensor& sum_sq, const AdagradParams& p) {
  visit_float(param.dtype(), "adagrad_update", [&](auto tag) {
    using T = decltype(tag);
    T* w = param.data<T>();
    const T* g = grad.data<T>();
    T* acc = sum_sq.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      const auto c = adagrad_step_constants(p);
      const VectorIsa isa = best_vector_isa();
      parallel_chunks(param.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
        adagrad_update_f32(isa, w + begin, g + begin, acc + begin, end - begin, c);
      });
      return;
    }
    const T lr = static_cast<T>(p.lr), eps = static_cast<T>(p.eps), wd = static_cast<T>(p.weight_decay);
    parallel_chunks(param.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const T d = p.weight_decay != 0.0 ? g[i] + wd * w[i] : g[i];
        acc[i] += d * d;
        w[i] -= lr * (d / (std::sqrt(acc[i]) + eps));
      }
    });
  });
}

}  // namespace pw::kernels::cpu
