#include "models/layers/dlrm_features.h"

#include <algorithm>
#include <cmath>

#include "models/rng.h"

namespace pw::models {
namespace {

using kernels::DType;

struct FeaturesContext : Context {
  std::unique_ptr<Context> bottom;
  std::vector<std::unique_ptr<Context>> bags;
  Tensor grad_y;   // kept by backward_input for backward_weight
};

Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

}  // namespace

Tensor unpack_bag_ids(const Tensor& x, const data::ClickFeatures& f, int feature) {
  const Tensor h = on_host(x);
  const std::int64_t n = h.dim(0), width = h.dim(1);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n * f.bag_size));
  const float* v = h.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < f.bag_size; ++k) {
      const float value = v[i * width + f.id_column(feature, k)];
      PW_INPUT_CHECK(value >= 0.0f && value < static_cast<float>(data::kMaxPackedId) && std::floor(value) == value,
                     "packed click row " << i << ", sparse feature " << feature << ", id " << k << ": " << value
                                         << " is not an id; expected an integer in [0, " << data::kMaxPackedId << ")");
      ids[static_cast<std::size_t>(i * f.bag_size + k)] = static_cast<std::int64_t>(value);
    }
  }
  return Tensor::from_vector(ids, {n, f.bag_size}, x.device());
}

DlrmFeatures::DlrmFeatures(data::ClickFeatures features, int dim, std::unique_ptr<Layer> bottom,
                           std::vector<std::unique_ptr<Layer>> bags)
    : features_(std::move(features)), dim_(dim) {
  data::check_click_features(features_);
  PW_INPUT_CHECK(features_.dense >= 1, "DLRM needs at least one dense feature for its bottom MLP");
  PW_INPUT_CHECK(static_cast<int>(bags.size()) == features_.sparse(),
                 "DlrmFeatures: " << bags.size() << " embedding bags for " << features_.sparse() << " sparse features");
  add_child("bottom", std::move(bottom));
  for (std::size_t f = 0; f < bags.size(); ++f) add_child("emb." + std::to_string(f), std::move(bags[f]));
}

Tensor DlrmFeatures::example_input(const Shape& shape, kernels::Device device, std::uint64_t seed) const {
  output_shape_impl(shape);   // the packed width, or the error naming it
  Rng rng(seed);
  const std::int64_t n = shape[0], width = features_.width();
  std::vector<float> values(static_cast<std::size_t>(n * width));
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t c = 0; c < features_.dense; ++c)
      values[static_cast<std::size_t>(i * width + c)] = static_cast<float>(rng.uniform(-1.0, 1.0));
    for (int f = 0; f < features_.sparse(); ++f)
      for (int k = 0; k < features_.bag_size; ++k) {
        const auto rows = static_cast<double>(features_.table_sizes[static_cast<std::size_t>(f)]);
        values[static_cast<std::size_t>(i * width + features_.id_column(f, k))] =
            static_cast<float>(std::min(rows - 1.0, std::floor(rng.uniform(0.0, rows))));
      }
  }
  return Tensor::from_vector(values, shape, device);
}

Shape DlrmFeatures::output_shape_impl(const Shape& input) const {
  PW_INPUT_CHECK(input.size() == 2 && input[1] == features_.width(),
                 "DLRM expects packed click rows [N, " << features_.width() << "] (" << features_.dense << " dense + "
                                                       << features_.sparse() << " x " << features_.bag_size
                                                       << " ids), got " << shape_str(input));
  return {input[0], static_cast<std::int64_t>(1 + features_.sparse()) * dim_};
}

std::int64_t DlrmFeatures::activation_elements(const Shape& input) const {
  const std::int64_t n = input.at(0);
  return children_[0].second->activation_elements({n, features_.dense}) + shape_numel(output_shape_impl(input));
}

Layer::Output DlrmFeatures::forward_impl(const Tensor& x, Mode mode) {
  PW_INPUT_CHECK(x.dtype() == DType::F32, "DLRM expects F32 packed click rows, got " << x.describe());
  const std::int64_t n = x.dim(0), width = x.dim(1);
  const Tensor h = on_host(x);
  Tensor dense = Tensor::empty({n, features_.dense}, DType::F32, Device::cpu());
  for (std::int64_t i = 0; i < n; ++i) {
    std::copy_n(h.data<float>() + i * width, features_.dense, dense.data<float>() + i * features_.dense);
  }
  auto ctx = std::make_unique<FeaturesContext>();
  std::vector<Tensor> parts;
  auto bottom = children_[0].second->forward(dense.to(device_), mode);
  parts.push_back(bottom.y.to(Device::cpu()).to(DType::F32));   // children may compute in 16 bits
  ctx->bottom = std::move(bottom.ctx);
  for (int f = 0; f < features_.sparse(); ++f) {
    auto bag = children_[static_cast<std::size_t>(f + 1)].second->forward(unpack_bag_ids(x, features_, f), mode);
    parts.push_back(bag.y.to(Device::cpu()).to(DType::F32));
    ctx->bags.push_back(std::move(bag.ctx));
  }
  const auto v = static_cast<std::int64_t>(parts.size());
  Tensor y = Tensor::empty({n, v * dim_}, DType::F32, Device::cpu());
  for (std::int64_t p = 0; p < v; ++p) {
    PW_CHECK(parts[p].shape() == Shape({n, dim_}) && parts[p].dtype() == DType::F32,
             "DlrmFeatures: block " << p << " produced " << parts[p].describe() << ", expected F32 [" << n << ", "
                                    << dim_ << "]");
    for (std::int64_t i = 0; i < n; ++i) {
      std::copy_n(parts[p].data<float>() + i * dim_, dim_, y.data<float>() + (i * v + p) * dim_);
    }
  }
  if (mode == Mode::Eval) ctx.reset();
  return {y.to(device_), std::move(ctx)};
}

void DlrmFeatures::children_backward(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<FeaturesContext&>(ctx);
  PW_CHECK(c.bottom != nullptr, "DlrmFeatures.backward after an eval-mode forward or twice");
  const Tensor g = on_host(grad_y);
  const std::int64_t n = g.dim(0), v = 1 + features_.sparse();
  for (std::int64_t p = 0; p < v; ++p) {
    Tensor part = Tensor::empty({n, dim_}, DType::F32, Device::cpu());
    for (std::int64_t i = 0; i < n; ++i) {
      std::copy_n(g.data<float>() + (i * v + p) * dim_, dim_, part.data<float>() + i * dim_);
    }
    Context& child_ctx = p == 0 ? *c.bottom : *c.bags[static_cast<std::size_t>(p - 1)];
    children_[static_cast<std::size_t>(p)].second->backward(child_ctx, part.to(device_));
  }
  c.bottom.reset();
  c.bags.clear();
}

Tensor DlrmFeatures::backward_impl(Context& ctx, const Tensor& grad_y) {
  children_backward(ctx, grad_y);
  return Tensor::zeros(ctx.input_shape, DType::F32, device_);
}

// Every parameter here sits behind the input, so the input half is free: zeros now, all the
// children's work in the weight half.
Tensor DlrmFeatures::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  static_cast<FeaturesContext&>(ctx).grad_y = grad_y;
  return Tensor::zeros(ctx.input_shape, DType::F32, device_);
}

void DlrmFeatures::backward_weight_impl(Context& ctx, const Tensor&) {
  auto& c = static_cast<FeaturesContext&>(ctx);
  children_backward(ctx, c.grad_y);
  c.grad_y = Tensor();
}

}  // namespace pw::models
