#pragma once
// Backend entry points: CPU implementations (oneDNN for conv/pool/matmul and batch-norm evaluation, own OpenMP loops (parallel.h) for the rest; F64 through reference loops).
// Same signatures as kernels/ops/*.h; callers go through those, which validate and dispatch.
#include "kernels/ops/activation.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/cast.h"
#include "kernels/ops/conv2d.h"
#include "kernels/ops/dropout.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/linear.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/optimizer.h"
#include "kernels/ops/pool.h"

namespace pw::kernels::cpu {

// conv2d
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p);
Tensor conv2d_backward_data(const Tensor& grad_y, const Tensor& w, const Shape& x_shape, const Conv2dParams& p);
void conv2d_backward_filter(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias,
                            const Conv2dParams& p);

// batch_norm
Tensor batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                Tensor& running_var, Tensor& save_mean, Tensor& save_invstd,
                                const BatchNormParams& p);
Tensor batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, const BatchNormParams& p);
BatchNormGrads batch_norm_backward(const Tensor& x, const Tensor& grad_y, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd, const BatchNormParams& p);

// activation
Tensor relu_forward(const Tensor& x);
Tensor relu_backward(const Tensor& y, const Tensor& grad_y);

// pool
MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dParams& p);
Tensor max_pool2d_backward(const Tensor& grad_y, const Tensor& workspace, const Shape& x_shape, const Pool2dParams& p);
Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape, const Pool2dParams& p);
Tensor adaptive_avg_pool2d_forward(const Tensor& x, int out_h, int out_w);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape);

// linear
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias);
Tensor linear_backward_data(const Tensor& grad_y, const Tensor& w);
void linear_backward_weight(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias);
Tensor matmul(const Tensor& a, const Tensor& b, Transpose ta = Transpose::No, Transpose tb = Transpose::No);

// elementwise
Tensor add(const Tensor& a, const Tensor& b);
void add_inplace(Tensor& dst, const Tensor& src, double alpha = 1.0);
void scale_inplace(Tensor& t, double alpha);
double sum(const Tensor& t);
double sum_of_squares(const Tensor& t);
std::vector<double> sums_of_squares(const std::vector<Tensor>& ts);

// cast
Tensor cast(const Tensor& x, DType dtype);

// dropout
DropoutResult dropout_forward(const Tensor& x, double p, std::uint64_t seed);
Tensor dropout_backward(const Tensor& grad_y, const Tensor& mask, double p);

// loss
CrossEntropyResult softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels);
Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale);

// embedding
Tensor embedding_gather(const Tensor& table, const Tensor& ids);
void embedding_scatter_add(Tensor& grad_table, const Tensor& ids, const Tensor& grad_rows);

// optimizer
void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p, std::int64_t step);
void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p, std::int64_t step);
void adagrad_update(Tensor& param, const Tensor& grad, Tensor& sum_sq, const AdagradParams& p);

}  // namespace pw::kernels::cpu
