// Dense optimizer updates on CUDA, in place, with torch.optim's formulas (SGD without dampening
// or Nesterov, Adam without AMSGrad, Adagrad without lr decay). Step-dependent scalars are
// computed on the host in double.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

#include <cmath>

namespace pw::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::kThreads;

// ---- kernels ------------------------------------------------------------------------------------

// g = grad + wd * param; param -= lr * g.
__global__ void sgd_plain_kernel(float* __restrict__ param, const float* __restrict__ grad, std::int64_t n, float lr,
                                 float wd) {
  PW_CUDA_KERNEL_LOOP(i, n) {
    const float g = grad[i] + wd * param[i];
    param[i] -= lr * g;
  }
}

// g = grad + wd * param; buf = first ? g : momentum * buf + g; param -= lr * buf.
__global__ void sgd_momentum_kernel(float* __restrict__ param, const float* __restrict__ grad,
                                    float* __restrict__ buf, std::int64_t n, float lr, float momentum, float wd,
                                    bool first) {
  PW_CUDA_KERNEL_LOOP(i, n) {
    const float g = grad[i] + wd * param[i];
    const float b = first ? g : momentum * buf[i] + g;
    buf[i] = b;
    param[i] -= lr * b;
  }
}

// g = grad + wd * param; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// param -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), bc_k = 1 - beta_k^step.
__global__ void adam_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
                            float* __restrict__ v, std::int64_t n, float step_size, float beta1, float beta2,
                            float eps, float wd, float sqrt_bc2) {
  PW_CUDA_KERNEL_LOOP(i, n) {
    const float g = grad[i] + wd * param[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / sqrt_bc2 + eps;
    param[i] -= step_size * (mi / denom);
  }
}

// g = grad + wd * param; sum += g^2; param -= lr * g / (sqrt(sum) + eps).
__global__ void adagrad_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ sum_sq,
                               std::int64_t n, float lr, float eps, float wd) {
  PW_CUDA_KERNEL_LOOP(i, n) {
    const float g = grad[i] + wd * param[i];
    const float s = sum_sq[i] + g * g;
    sum_sq[i] = s;
    param[i] -= lr * (g / (sqrtf(s) + eps));
  }
}

void require_like(const Tensor& t, const Tensor& param, const char* what) {
  detail::require_f32(t, what);
  PW_CHECK(t.numel() == param.numel() && t.device() == param.device(),
           "" << what << " " << t.describe() << " does not match param " << param.describe());
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p, std::int64_t step) {
  detail::require_f32(param, "sgd_update: param");
  require_like(grad, param, "sgd_update: grad");
  const Device dev = param.device();
  CudaDeviceGuard guard(dev.index);
  const std::int64_t n = param.numel();
  if (n == 0) return;
  if (p.momentum == 0.0) {
    sgd_plain_kernel<<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(
        param.data<float>(), grad.data<float>(), n, static_cast<float>(p.lr), static_cast<float>(p.weight_decay));
  } else {
    require_like(momentum_buf, param, "sgd_update: momentum_buf");
    PW_CHECK(step >= 1, "sgd_update: step counts from 1, got " << step);
    sgd_momentum_kernel<<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(
        param.data<float>(), grad.data<float>(), momentum_buf.data<float>(), n, static_cast<float>(p.lr),
        static_cast<float>(p.momentum), static_cast<float>(p.weight_decay), step == 1);
  }
  PW_CUDA_CHECK_LAUNCH();
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p, std::int64_t step) {
  detail::require_f32(param, "adam_update: param");
  require_like(grad, param, "adam_update: grad");
  require_like(m, param, "adam_update: m");
  require_like(v, param, "adam_update: v");
  PW_CHECK(step >= 1, "adam_update: step counts from 1, got " << step);
  const Device dev = param.device();
  CudaDeviceGuard guard(dev.index);
  const std::int64_t n = param.numel();
  if (n == 0) return;
  const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(p.beta2, static_cast<double>(step));
  adam_kernel<<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(
      param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(), n, static_cast<float>(p.lr / bc1),
      static_cast<float>(p.beta1), static_cast<float>(p.beta2), static_cast<float>(p.eps),
      static_cast<float>(p.weight_decay), static_cast<float>(std::sqrt(bc2)));
  PW_CUDA_CHECK_LAUNCH();
}

void adagrad_update(Tensor& param, const Tensor& grad, Tensor& sum_sq, const AdagradParams& p) {
  detail::require_f32(param, "adagrad_update: param");
  require_like(grad, param, "adagrad_update: grad");
  require_like(sum_sq, param, "adagrad_update: sum_sq");
  const Device dev = param.device();
  CudaDeviceGuard guard(dev.index);
  const std::int64_t n = param.numel();
  if (n == 0) return;
  adagrad_kernel<<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(param.data<float>(), grad.data<float>(),
                                                                 sum_sq.data<float>(), n, static_cast<float>(p.lr),
                                                                 static_cast<float>(p.eps),
                                                                 static_cast<float>(p.weight_decay));
  PW_CUDA_CHECK_LAUNCH();
}

}  // namespace pw::kernels::cuda
