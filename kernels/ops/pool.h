#pragma once
// Max, average and adaptive-average pooling, NCHW.
#include "kernels/tensor.h"

namespace pw::kernels {

struct Pool2dParams {
  int kernel_h = 2, kernel_w = 2;
  int stride_h = 2, stride_w = 2;
  int pad_h = 0, pad_w = 0;
};

Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p);

struct MaxPoolResult {
  Tensor y;
  Tensor workspace;   // backend-specific record of the arg-max; only max_pool2d_backward reads it
};
MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dParams& p);
Tensor max_pool2d_backward(const Tensor& grad_y, const Tensor& workspace, const Shape& x_shape, const Pool2dParams& p);

// Average pooling counting padded cells in the divisor (PyTorch's count_include_pad=True).
Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape, const Pool2dParams& p);

// PyTorch's adaptive average pooling: output cell i covers [floor(i*H/OH), ceil((i+1)*H/OH)).
Tensor adaptive_avg_pool2d_forward(const Tensor& x, int out_h, int out_w);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape);

}  // namespace pw::kernels
