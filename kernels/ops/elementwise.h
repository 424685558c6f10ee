#pragma once
// Element-wise arithmetic: the residual add and the in-place helpers gradients need.
#include <vector>

#include "kernels/tensor.h"

namespace pw::kernels {

Tensor add(const Tensor& a, const Tensor& b);            // residual add, same shapes
void add_inplace(Tensor& dst, const Tensor& src, double alpha = 1.0);   // dst += alpha * src
void scale_inplace(Tensor& t, double alpha);              // t *= alpha
double sum(const Tensor& t);                              // reduction to a host value
double sum_of_squares(const Tensor& t);
// sum_of_squares of each tensor, in order and bit for bit, all on one device. On CUDA the host waits
// once for all of them instead of once a tensor (the per-step gradient norm of a whole stage).
std::vector<double> sums_of_squares(const std::vector<Tensor>& ts);

}  // namespace pw::kernels
