#pragma once
// 2-D convolution, NCHW, weights [Cout, Cin, KH, KW], no groups or dilation.
#include "kernels/tensor.h"

namespace pw::kernels {

struct Conv2dParams {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
};

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p);

// y = conv(x, w) + bias; `bias` may be undefined.
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p);
// dL/dx for an input of shape `x_shape`.
Tensor conv2d_backward_data(const Tensor& grad_y, const Tensor& w, const Shape& x_shape, const Conv2dParams& p);
// Accumulates dL/dw into grad_w and (when defined) dL/dbias into grad_bias.
void conv2d_backward_filter(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias,
                            const Conv2dParams& p);

}  // namespace pw::kernels
