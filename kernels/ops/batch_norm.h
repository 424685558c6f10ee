#pragma once
// Spatial batch normalisation over N, H, W per channel (NCHW), or over N for [N, C] inputs.
#include "kernels/tensor.h"

namespace pw::kernels {

struct BatchNormParams {
  double momentum = 0.1;   // running = (1 - momentum) * running + momentum * batch (PyTorch convention)
  double eps = 1e-5;
};

// Training: normalises with batch statistics, updates running_mean / running_var (unbiased
// variance, as PyTorch) in place, and writes save_mean / save_invstd ([C]) for backward.
Tensor batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                Tensor& running_var, Tensor& save_mean, Tensor& save_invstd,
                                const BatchNormParams& p);
// Evaluation: normalises with the running statistics.
Tensor batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, const BatchNormParams& p);

struct BatchNormGrads {
  Tensor grad_x;
  Tensor grad_gamma;   // [C], not accumulated: the layer decides when to add it
  Tensor grad_beta;    // [C]
};
BatchNormGrads batch_norm_backward(const Tensor& x, const Tensor& grad_y, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd, const BatchNormParams& p);

}  // namespace pw::kernels
