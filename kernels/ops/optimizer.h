#pragma once
// Dense optimizer updates, in place, PyTorch's formulas (torch.optim.SGD / Adam / Adagrad).
#include "kernels/tensor.h"

namespace pw::kernels {

struct SgdParams {
  double lr = 0.01, momentum = 0.0, weight_decay = 0.0;
};
// g = grad + wd*param; buf = momentum*buf + g (buf = g on the first step); param -= lr*buf.
void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p, std::int64_t step);

struct AdamParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};
// step counts from 1 (bias correction).
void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p, std::int64_t step);

struct AdagradParams {
  double lr = 1e-2, eps = 1e-10, weight_decay = 0.0;
};
void adagrad_update(Tensor& param, const Tensor& grad, Tensor& sum_sq, const AdagradParams& p);

}  // namespace pw::kernels
