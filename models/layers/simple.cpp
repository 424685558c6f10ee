#include "models/layers/simple.h"

#include "kernels/ops/activation.h"
#include "kernels/ops/dropout.h"
#include "models/forward_key.h"
#include "models/rng.h"

namespace pw::models {
namespace {
struct SavedTensor : Context {
  Tensor t;
};
}  // namespace

Layer::Output ReLU::forward_impl(const Tensor& x, Mode) {
  auto ctx = std::make_unique<SavedTensor>();
  Tensor y = kernels::relu_forward(x);
  ctx->t = y;
  return {std::move(y), std::move(ctx)};
}

Tensor ReLU::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<SavedTensor&>(ctx);
  Tensor g = kernels::relu_backward(c.t, grad_y);
  c.t = Tensor();
  return g;
}

static kernels::Pool2dParams pool_params(int kernel, int stride, int padding) {
  PW_CHECK(kernel > 0 && stride > 0 && padding >= 0 && padding * 2 <= kernel, "bad pooling configuration kernel "
                                                                                  << kernel << " stride " << stride
                                                                                  << " padding " << padding);
  return {kernel, kernel, stride, stride, padding, padding};
}

static Shape check_nchw(const Shape& input, const char* layer) {
  PW_CHECK(input.size() == 4, layer << " expects [N, C, H, W], got " << shape_str(input));
  return input;
}

MaxPool2d::MaxPool2d(int kernel, int stride, int padding) : params_pool_(pool_params(kernel, stride, padding)) {}

Shape MaxPool2d::output_shape_impl(const Shape& input) const {
  return kernels::pool2d_output_shape(check_nchw(input, "MaxPool2d"), params_pool_);
}

Layer::Output MaxPool2d::forward_impl(const Tensor& x, Mode) {
  auto r = kernels::max_pool2d_forward(x, params_pool_);
  auto ctx = std::make_unique<SavedTensor>();
  ctx->t = std::move(r.workspace);
  return {std::move(r.y), std::move(ctx)};
}

Tensor MaxPool2d::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<SavedTensor&>(ctx);
  Tensor g = kernels::max_pool2d_backward(grad_y, c.t, ctx.input_shape, params_pool_);
  c.t = Tensor();
  return g;
}

AvgPool2d::AvgPool2d(int kernel, int stride, int padding) : params_pool_(pool_params(kernel, stride, padding)) {}

Shape AvgPool2d::output_shape_impl(const Shape& input) const {
  return kernels::pool2d_output_shape(check_nchw(input, "AvgPool2d"), params_pool_);
}

Layer::Output AvgPool2d::forward_impl(const Tensor& x, Mode) { return {kernels::avg_pool2d_forward(x, params_pool_), nullptr}; }

Tensor AvgPool2d::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  return kernels::avg_pool2d_backward(grad_y, ctx.input_shape, params_pool_);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int out_h, int out_w) : out_h_(out_h), out_w_(out_w) {
  PW_CHECK(out_h > 0 && out_w > 0, "bad AdaptiveAvgPool2d output size " << out_h << "x" << out_w);
}

Shape AdaptiveAvgPool2d::output_shape_impl(const Shape& input) const {
  check_nchw(input, "AdaptiveAvgPool2d");
  return {input[0], input[1], out_h_, out_w_};
}

Layer::Output AdaptiveAvgPool2d::forward_impl(const Tensor& x, Mode) {
  return {kernels::adaptive_avg_pool2d_forward(x, out_h_, out_w_), nullptr};
}

Tensor AdaptiveAvgPool2d::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  return kernels::adaptive_avg_pool2d_backward(grad_y, ctx.input_shape);
}

Shape Flatten::output_shape_impl(const Shape& input) const {
  PW_CHECK(!input.empty(), "Flatten needs at least one dimension");
  std::int64_t rest = 1;
  for (std::size_t i = 1; i < input.size(); ++i) rest *= input[i];
  return {input[0], rest};
}

Layer::Output Flatten::forward_impl(const Tensor& x, Mode) { return {x.reshape(output_shape_impl(x.shape())), nullptr}; }

Tensor Flatten::backward_input_impl(Context& ctx, const Tensor& grad_y) { return grad_y.reshape(ctx.input_shape); }

Dropout::Dropout(double p, std::uint64_t seed) : p_(p), seed_(seed) {
  PW_CHECK(p >= 0.0 && p < 1.0, "Dropout probability must be in [0, 1), got " << p);
}

Layer::Output Dropout::forward_impl(const Tensor& x, Mode mode) {
  if (mode == Mode::Eval || p_ == 0.0) return {x, nullptr};
  // Under a ForwardKey (the pipeline sets one per step and micro-batch) the mask depends on the
  // key alone, so a recompute draws the same mask; otherwise on the call count.
  const auto key = current_forward_key();
  const std::uint64_t draw = key ? *key : calls_++;
  auto r = kernels::dropout_forward(x, p_, splitmix64(seed_ ^ splitmix64(draw)));
  auto ctx = std::make_unique<SavedTensor>();
  ctx->t = std::move(r.mask);
  return {std::move(r.y), std::move(ctx)};
}

Tensor Dropout::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  auto* c = dynamic_cast<SavedTensor*>(&ctx);
  if (c == nullptr || !c->t.defined()) return grad_y;   // eval-mode or p == 0 forward
  Tensor g = kernels::dropout_backward(grad_y, c->t, p_);
  c->t = Tensor();
  return g;
}

}  // namespace pw::models
