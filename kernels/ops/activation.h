#pragma once
#include "kernels/tensor.h"

namespace pw::kernels {

Tensor relu_forward(const Tensor& x);
// grad_x = grad_y where y > 0, else 0 (y is relu's output).
Tensor relu_backward(const Tensor& y, const Tensor& grad_y);

}  // namespace pw::kernels
