#pragma once
// Fully connected layer: y[N, M] = x[N, K] * w[M, K]^T + b[M] (PyTorch's weight layout).
#include "kernels/tensor.h"

namespace pw::kernels {

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias);   // bias may be undefined
Tensor linear_backward_data(const Tensor& grad_y, const Tensor& w);
// Accumulates dL/dw into grad_w and (when defined) dL/db into grad_bias.
void linear_backward_weight(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias);

enum class Transpose { No, Yes };
// c[M, N] = op(a) * op(b) for 2-D tensors.
Tensor matmul(const Tensor& a, const Tensor& b, Transpose ta = Transpose::No, Transpose tb = Transpose::No);

}  // namespace pw::kernels
