#pragma once
// resnet18's layer1.0 (a BasicBlock: conv1, bn1, relu, conv2, bn2, the skip add and a ReLU) on the
// activations and output gradient the whole model hands it, and the same block written out op by
// op, so it runs on any device and dtype: in F64 on the CPU it is the reference for the F32 block
// layer on any device. Random tensors can miss what real activations exercise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/ops/activation.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/conv2d.h"
#include "kernels/ops/elementwise.h"
#include "models/layers/sequential.h"
#include "models/loss.h"
#include "models/zoo/model_spec.h"
#include "tests/support/test_util.h"

namespace pw::test {

struct BasicBlockCase {
  std::unique_ptr<models::Sequential> model;   // resnet18 width 32 for 3x32x32, on cpu:0
  std::size_t block = 0;                       // index of layer1.0 among its top-level layers
  kernels::Tensor input, grad_output;          // what the model hands layer1.0 (F32, cpu:0)
};

inline BasicBlockCase resnet18_block_case() {
  models::ModelOptions o;
  o.width = 32;
  o.sample_shape = {3, 32, 32};
  o.num_classes = 10;
  BasicBlockCase c;
  c.model = models::build_model(models::make_model_spec("resnet18", o), 1);
  while (c.block < c.model->size() && c.model->children()[c.block].first != "layer1.0") ++c.block;
  if (c.block == c.model->size()) throw Error("resnet18 has no layer1.0");
  std::vector<std::int64_t> labels;
  for (int i = 0; i < 32; ++i) labels.push_back(i % 10);
  std::vector<std::unique_ptr<models::Context>> contexts;
  kernels::Tensor h = random_tensor({32, 3, 32, 32}, 7);
  for (std::size_t i = 0; i < c.model->size(); ++i) {
    if (i == c.block) c.input = h;
    auto out = c.model->at(i).forward(h, models::Mode::Train);
    h = out.y;
    contexts.push_back(std::move(out.ctx));
  }
  kernels::Tensor g =
      models::softmax_cross_entropy(h, kernels::Tensor::from_vector(labels, {32}), 1.0 / 32).grad_logits;
  for (std::size_t i = c.model->size(); i-- > c.block + 1;) g = c.model->at(i).backward(*contexts[i], g);
  c.grad_output = g;
  c.model->zero_grad();
  return c;
}

// Every intermediate of one forward and backward pass of the block.
struct BasicBlockPass {
  kernels::Tensor a1, b1, r1, a2, b2, v, y;                 // forward (v: the final ReLU's input)
  kernels::Tensor gs, gb2, gr1_raw, gr1, gb1, gx;          // input-side gradients
  kernels::Tensor gw1, gw2, gg1, gbeta1, gg2, gbeta2;       // parameter gradients
};

// The block on `input`'s device and dtype, with `weights` (the layer's parameter names) converted
// to them. With `feed`, every op takes its inputs from `feed` instead of the ops before it, so
// each op's own error shows on the reference's values. With `masks`, both ReLUs keep the elements
// that are positive in `masks` (its r1 and y) instead of deciding from this pass's own values: a
// pre-activation within rounding of zero then goes the same way in F64 as in the F32 pass it is
// compared with, so the comparison measures arithmetic, not which side of zero one value fell on.
inline BasicBlockPass basic_block_pass(const kernels::Tensor& input, const kernels::Tensor& grad_output,
                                       const std::map<std::string, kernels::Tensor>& weights,
                                       const BasicBlockPass* feed = nullptr, const BasicBlockPass* masks = nullptr) {
  namespace k = kernels;
  const k::Device dev = input.device();
  const k::DType dt = input.dtype();
  const auto here = [&](const k::Tensor& t) { return t.to(dt).to(dev); };
  const auto in = [&](const k::Tensor& own, k::Tensor BasicBlockPass::*field) {
    return feed ? here(feed->*field) : own;
  };
  const auto w = [&](const char* name) { return here(weights.at(name)); };
  const std::int64_t channels = weights.at("bn1.weight").numel();
  const auto stats = [&] { return k::Tensor::zeros({channels}, dt, dev); };
  const k::Conv2dParams conv{.stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  const k::BatchNormParams bn{0.1, 1e-5};
  k::Tensor rm1 = stats(), rv1 = stats(), sm1 = stats(), si1 = stats();
  k::Tensor rm2 = stats(), rv2 = stats(), sm2 = stats(), si2 = stats();

  BasicBlockPass p;
  p.a1 = k::conv2d_forward(input, w("conv1.weight"), k::Tensor(), conv);
  p.b1 = k::batch_norm_forward_train(in(p.a1, &BasicBlockPass::a1), w("bn1.weight"), w("bn1.bias"), rm1, rv1, sm1, si1, bn);
  p.r1 = masks ? k::relu_backward(here(masks->r1), in(p.b1, &BasicBlockPass::b1))
               : k::relu_forward(in(p.b1, &BasicBlockPass::b1));
  p.a2 = k::conv2d_forward(in(p.r1, &BasicBlockPass::r1), w("conv2.weight"), k::Tensor(), conv);
  p.b2 = k::batch_norm_forward_train(in(p.a2, &BasicBlockPass::a2), w("bn2.weight"), w("bn2.bias"), rm2, rv2, sm2, si2, bn);
  p.v = k::add(in(p.b2, &BasicBlockPass::b2), input);
  p.y = masks ? k::relu_backward(here(masks->y), p.v) : k::relu_forward(p.v);

  p.gs = k::relu_backward(masks ? here(masks->y) : in(p.y, &BasicBlockPass::y), grad_output);
  const auto bn2 = k::batch_norm_backward(in(p.a2, &BasicBlockPass::a2), in(p.gs, &BasicBlockPass::gs),
                                          w("bn2.weight"), sm2, si2, bn);
  p.gb2 = bn2.grad_x;
  p.gg2 = bn2.grad_gamma;
  p.gbeta2 = bn2.grad_beta;
  p.gr1_raw = k::conv2d_backward_data(in(p.gb2, &BasicBlockPass::gb2), w("conv2.weight"), p.r1.shape(), conv);
  p.gw2 = k::Tensor::zeros(weights.at("conv2.weight").shape(), dt, dev);
  k::Tensor none2;
  k::conv2d_backward_filter(in(p.r1, &BasicBlockPass::r1), in(p.gb2, &BasicBlockPass::gb2), p.gw2, none2, conv);
  p.gr1 = k::relu_backward(masks ? here(masks->r1) : in(p.r1, &BasicBlockPass::r1),
                           in(p.gr1_raw, &BasicBlockPass::gr1_raw));
  const auto bn1 = k::batch_norm_backward(in(p.a1, &BasicBlockPass::a1), in(p.gr1, &BasicBlockPass::gr1),
                                          w("bn1.weight"), sm1, si1, bn);
  p.gb1 = bn1.grad_x;
  p.gg1 = bn1.grad_gamma;
  p.gbeta1 = bn1.grad_beta;
  p.gw1 = k::Tensor::zeros(weights.at("conv1.weight").shape(), dt, dev);
  k::Tensor none1;
  k::conv2d_backward_filter(input, in(p.gb1, &BasicBlockPass::gb1), p.gw1, none1, conv);
  p.gx = k::add(k::conv2d_backward_data(in(p.gb1, &BasicBlockPass::gb1), w("conv1.weight"), input.shape(), conv),
                in(p.gs, &BasicBlockPass::gs));
  return p;
}

// The layer's parameter gradient named `name` in a pass.
inline const kernels::Tensor& basic_block_grad(const BasicBlockPass& p, const std::string& name) {
  static const std::map<std::string, kernels::Tensor BasicBlockPass::*> fields = {
      {"conv1.weight", &BasicBlockPass::gw1}, {"bn1.weight", &BasicBlockPass::gg1},
      {"bn1.bias", &BasicBlockPass::gbeta1},  {"conv2.weight", &BasicBlockPass::gw2},
      {"bn2.weight", &BasicBlockPass::gg2},   {"bn2.bias", &BasicBlockPass::gbeta2}};
  return p.*fields.at(name);
}

// ||a - ref|| / ||ref||.
inline double relative_error(const kernels::Tensor& a, const kernels::Tensor& ref) {
  const auto va = a.to_double_vector(), vr = ref.to_double_vector();
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < va.size() && i < vr.size(); ++i) {
    num += (va[i] - vr[i]) * (va[i] - vr[i]);
    den += vr[i] * vr[i];
  }
  return va.size() != vr.size() ? INFINITY : den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Elements whose sign (> 0) differs between `a` and `b`, and the largest |b| among them.
struct SignFlips {
  int count = 0;
  double largest = 0.0;
};
inline SignFlips sign_flips(const kernels::Tensor& a, const kernels::Tensor& b) {
  const auto va = a.to_double_vector(), vb = b.to_double_vector();
  SignFlips f;
  for (std::size_t i = 0; i < va.size() && i < vb.size(); ++i)
    if ((va[i] > 0) != (vb[i] > 0)) {
      ++f.count;
      f.largest = std::max(f.largest, std::abs(vb[i]));
    }
  return f;
}

inline double largest_magnitude(const kernels::Tensor& t) {
  double m = 0.0;
  for (double v : t.to_double_vector()) m = std::max(m, std::abs(v));
  return m;
}

// The final ReLU's input (bn2's output plus the skip), element by element.
inline std::vector<double> preactivation(const BasicBlockPass& p) { return p.v.to_double_vector(); }


}  // namespace pw::test
