#pragma once
// Layers without parameters: ReLU, pooling, Flatten, Dropout.
#include <cstdint>

#include "kernels/ops/pool.h"
#include "models/layer.h"

namespace pw::models {

class ReLU : public Layer {
 public:
  std::string type_name() const override { return "ReLU"; }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override { return input; }
};

class MaxPool2d : public Layer {
 public:
  MaxPool2d(int kernel, int stride, int padding = 0);
  std::string type_name() const override { return "MaxPool2d"; }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;

 private:
  kernels::Pool2dParams params_pool_;
};

class AvgPool2d : public Layer {
 public:
  AvgPool2d(int kernel, int stride, int padding = 0);
  std::string type_name() const override { return "AvgPool2d"; }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;

 private:
  kernels::Pool2dParams params_pool_;
};

class AdaptiveAvgPool2d : public Layer {
 public:
  AdaptiveAvgPool2d(int out_h, int out_w);
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;

 private:
  int out_h_, out_w_;
};

// [N, ...] -> [N, prod(...)]; a view, no copy.
class Flatten : public Layer {
 public:
  std::string type_name() const override { return "Flatten"; }
  std::int64_t activation_elements(const Shape&) const override { return 0; }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;
};

// Inverted dropout in training, identity in evaluation. Each training forward draws a fresh mask
// from (seed, call count).
class Dropout : public Layer {
 public:
  Dropout(double p, std::uint64_t seed);
  std::string type_name() const override { return "Dropout"; }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override { return input; }

 private:
  double p_;
  std::uint64_t seed_;
  std::uint64_t calls_ = 0;
};

}  // namespace pw::models
