#include "models/layer.h"

#include <algorithm>

#include "kernels/allocator.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/half_support.h"
#include "kernels/ops/host_optimizer.h"
#include "models/rng.h"

namespace pw::models {

namespace {
thread_local Device t_layer_device = Device::cpu();
thread_local ParameterHome t_parameter_home = ParameterHome::Device;
}

Device default_layer_device() { return t_layer_device; }

LayerDeviceScope::LayerDeviceScope(Device device) : previous_(t_layer_device) { t_layer_device = device; }
LayerDeviceScope::~LayerDeviceScope() { t_layer_device = previous_; }

ParameterHome default_parameter_home() { return t_parameter_home; }

ParameterHomeScope::ParameterHomeScope(ParameterHome home) : previous_(t_parameter_home) { t_parameter_home = home; }
ParameterHomeScope::~ParameterHomeScope() { t_parameter_home = previous_; }

Layer::Output Layer::forward(const Tensor& x, Mode mode) {
  PW_CHECK(x.defined(), type_name() << ".forward: undefined input");
  PW_CHECK(x.device() == device_, type_name() << ".forward: input " << x.describe() << " but the layer is on "
                                              << device_.str());
  const Shape expected = output_shape_impl(x.shape());
  const bool mixed = precision_ != Precision::Fp32;
  const bool widen = mixed && kernels::is_half(x.dtype()) && low_precision_input() == LowPrecisionInput::No;
  Output out = forward_impl(widen ? x.to(kernels::DType::F32) : x, mode);
  PW_CHECK(out.y.shape() == expected, type_name() << ".forward produced " << out.y.describe() << ", expected "
                                                  << shape_str(expected));
  const kernels::DType produced = out.y.dtype();
  if (mixed && kernels::is_floating_point(produced) && produced != activation_dtype())
    out.y = out.y.to(activation_dtype());
  if (!out.ctx) out.ctx = std::make_unique<Context>();
  out.ctx->input_shape = x.shape();
  out.ctx->output_shape = expected;
  out.ctx->input_dtype = x.dtype();
  out.ctx->produced_dtype = produced;
  return out;
}

namespace {

// The gradient in the dtype forward_impl produced (mixed precision: the output may have been
// converted after it), and an input gradient in the dtype the input came in.
Tensor as_produced(const Context& ctx, const Tensor& grad_y) {
  if (!kernels::is_floating_point(grad_y.dtype()) || grad_y.dtype() == ctx.produced_dtype ||
      !kernels::is_floating_point(ctx.produced_dtype))
    return grad_y;
  return grad_y.to(ctx.produced_dtype);
}

Tensor as_input(const Context& ctx, const Tensor& grad_x) {
  if (!grad_x.defined() || !kernels::is_floating_point(grad_x.dtype()) || grad_x.dtype() == ctx.input_dtype ||
      !kernels::is_floating_point(ctx.input_dtype))
    return grad_x;
  return grad_x.to(ctx.input_dtype);
}

}  // namespace

const Tensor& Layer::compute_weight(const Parameter& p) const {
  if (precision_ == Precision::Fp32) return p.value;
  PW_CHECK(p.compute.defined() && p.compute.dtype() == activation_dtype() && p.compute.shape() == p.value.shape(),
           type_name() << ": no " << precision_name(precision_) << " copy of parameter '" << p.name
                       << "' (set_precision or refresh_compute_copies was not called after it changed)");
  return p.compute;
}

void Layer::set_precision(Precision precision) {
  precision_ = precision;
  for (auto& [name, child] : children_) child->set_precision(precision);
  // Under mixed precision a weight with a 16-bit copy is the fp32 master; the copy is what runs.
  const auto value_kind = precision == Precision::Fp32 ? kernels::MemoryKind::Parameters : kernels::MemoryKind::MasterWeights;
  const auto copied = compute_copied_parameters();
  for (auto* p : copied) {
    if (precision == Precision::Fp32) p->compute = Tensor();
    kernels::set_memory_kind(p->value, value_kind);
  }
  for (auto& p : params_) {
    const bool copied_here = std::find(copied.begin(), copied.end(), p.get()) != copied.end();
    const bool master = precision != Precision::Fp32 && copied_here;
    if (master || !p->value.is_host_memory()) continue;
    // Built in host memory (ParameterHome::Host) but read by the ops as it is: onto the device.
    kernels::MemoryKindScope kind(kernels::MemoryKind::Parameters);
    Tensor on_device = Tensor::empty(p->value.shape(), p->value.dtype(), device_);
    on_device.copy_from(p->value);
    p->value = on_device;
  }
  refresh_compute_copies();
}

void Layer::refresh_compute_copies() {
  for (auto& [name, child] : children_) child->refresh_compute_copies();
  if (precision_ == Precision::Fp32) return;
  kernels::MemoryKindScope kind(kernels::MemoryKind::Parameters);
  for (auto* p : compute_copied_parameters()) {
    // Rounded into the copy in place, one weight at a time: a fresh copy made before the old one
    // goes would hold every weight twice in 16 bits at this moment. (A value kept in 16 bits,
    // sharded masters' weights, is its own copy.)
    const bool reusable = p->compute.defined() && p->compute.raw() != p->value.raw() &&
                          p->compute.shape() == p->value.shape() && p->compute.dtype() == activation_dtype();
    if (reusable && p->value.is_host_memory() && device_.is_cpu()) {
      kernels::host_round(p->value, p->compute);   // a master in host memory: no rounded copy on the device
    } else if (reusable) {
      kernels::MemoryKindScope rounding(kernels::MemoryKind::Workspace);   // the rounded values, until copied
      p->compute.copy_from(p->value.to(activation_dtype()));
    } else {
      // A master in host memory held for a GPU is rounded on the host (Tensor::empty_host's device
      // is cpu:0 there) and only the copy goes up.
      p->compute = p->value.to(activation_dtype());
      if (p->compute.device() != device_) p->compute = p->compute.to(device_);
    }
  }
}

Tensor Layer::backward(Context& ctx, const Tensor& grad_y) {
  PW_CHECK(!ctx.input_grad_done, type_name() << ".backward: this context was already used for backward");
  PW_CHECK(grad_y.shape() == ctx.output_shape, type_name() << ".backward: gradient " << grad_y.describe()
                                                          << " for an output of shape " << shape_str(ctx.output_shape));
  Tensor grad_x = as_input(ctx, backward_impl(ctx, as_produced(ctx, grad_y)));
  ctx.input_grad_done = true;
  return grad_x;
}

Tensor Layer::backward_impl(Context& ctx, const Tensor& grad_y) {
  Tensor grad_x = backward_input_impl(ctx, grad_y);
  backward_weight_impl(ctx, grad_y);
  return grad_x;
}

Tensor Layer::backward_input(Context& ctx, const Tensor& grad_y) {
  PW_CHECK(!ctx.input_grad_done, type_name() << ".backward_input: this context was already used for backward");
  PW_CHECK(grad_y.shape() == ctx.output_shape, type_name() << ".backward_input: gradient " << grad_y.describe()
                                                          << " for an output of shape " << shape_str(ctx.output_shape));
  const Tensor g = as_produced(ctx, grad_y);
  Tensor grad_x = as_input(ctx, backward_input_impl(ctx, g));
  if (!params_.empty()) ctx.grad_output = g;
  ctx.input_grad_done = true;
  return grad_x;
}

void Layer::backward_weight(Context& ctx) {
  PW_CHECK(ctx.input_grad_done, type_name() << ".backward_weight before backward_input");
  backward_weight_impl(ctx, ctx.grad_output);
  ctx.grad_output = Tensor();
}

std::int64_t Layer::activation_elements(const Shape& input) const {
  std::int64_t total = shape_numel(output_shape_impl(input));
  return total;
}

std::vector<std::pair<std::string, Parameter*>> Layer::named_parameters(const std::string& prefix) {
  std::vector<std::pair<std::string, Parameter*>> out;
  for (auto& p : params_) out.emplace_back(prefix + p->name, p.get());
  for (auto& [name, child] : children_) {
    auto sub = child->named_parameters(prefix + name + ".");
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, Buffer*>> Layer::named_buffers(const std::string& prefix) {
  std::vector<std::pair<std::string, Buffer*>> out;
  for (auto& b : buffers_) out.emplace_back(prefix + b->name, b.get());
  for (auto& [name, child] : children_) {
    auto sub = child->named_buffers(prefix + name + ".");
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<Parameter*> Layer::parameters() {
  std::vector<Parameter*> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::int64_t Layer::parameter_count() {
  std::int64_t n = 0;
  for (auto* p : parameters()) n += p->value.numel();
  return n;
}

namespace {
// Into t's own memory on a CPU device: a staging tensor would be counted on cpu:0 (every rank's
// layers are initialised at once, so cpu:0's peak and cap would see them all).
void store(Tensor& t, const std::vector<float>& v) {
  if (t.device().is_cpu() && t.dtype() == kernels::DType::F32) {
    std::copy(v.begin(), v.end(), t.data<float>());
    return;
  }
  t.copy_from(Tensor::from_vector(v, t.shape(), Device::cpu()));
}

void fill(Tensor& t, const Init& init, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  if (init.kind == Init::Kind::KeyedRows) {
    PW_CHECK(t.ndim() == 2, "keyed-rows initialisation needs a 2-D parameter, got " << t.describe());
    const auto dim = static_cast<int>(t.dim(1));
    for (std::int64_t r = 0; r < t.dim(0); ++r)
      keyed_uniform_row(seed, r, dim, init.a, v.data() + r * dim);
    store(t, v);
    return;
  }
  for (auto& x : v) {
    switch (init.kind) {
      case Init::Kind::Zeros: x = 0.0f; break;
      case Init::Kind::Ones: x = 1.0f; break;
      case Init::Kind::Uniform: x = static_cast<float>(rng.uniform(-init.a, init.a)); break;
      case Init::Kind::Normal: x = static_cast<float>(init.a * rng.normal()); break;
      case Init::Kind::KeyedRows: break;
    }
  }
  store(t, v);
}
}  // namespace

void Layer::initialize(std::uint64_t seed, const std::string& prefix) {
  for (auto& [name, p] : named_parameters(prefix)) {
    fill(p->value, p->init, hash_name(seed, name));
    p->grad.zero_();
  }
  for (auto& [name, b] : named_buffers(prefix)) fill(b->value, b->init, hash_name(seed, name));
}

void Layer::to(Device device) {
  if (device == device_) return;
  for (auto& p : params_) {
    {
      kernels::MemoryKindScope kind(p->compute.defined() ? kernels::MemoryKind::MasterWeights : kernels::MemoryKind::Parameters);
      p->value = p->value.to(device);
    }
    {
      kernels::MemoryKindScope kind(kernels::MemoryKind::Gradients);
      p->grad = p->grad.to(device);
    }
    kernels::MemoryKindScope kind(kernels::MemoryKind::Parameters);
    if (p->compute.defined()) p->compute = p->compute.to(device);
  }
  kernels::MemoryKindScope kind(kernels::MemoryKind::Parameters);
  for (auto& b : buffers_) b->value = b->value.to(device);
  for (auto& [name, child] : children_) child->to(device);
  device_ = device;
}

void Layer::zero_grad() {
  for (auto* p : parameters()) p->grad.zero_();
}

Parameter& Layer::add_parameter(const std::string& name, const Shape& shape, Init init) {
  auto p = std::make_unique<Parameter>();
  p->name = name;
  if (t_parameter_home == ParameterHome::Host) {
    kernels::MemoryKindScope kind(kernels::MemoryKind::MasterWeights);   // what it is meant to become
    p->value = Tensor::zeros_host(shape, kernels::DType::F32, device_);
  } else {
    kernels::MemoryKindScope kind(kernels::MemoryKind::Parameters);
    p->value = Tensor::zeros(shape, kernels::DType::F32, device_);
  }
  kernels::MemoryKindScope kind(kernels::MemoryKind::Gradients);
  p->grad = Tensor::zeros(shape, kernels::DType::F32, device_);
  p->init = init;
  params_.push_back(std::move(p));
  return *params_.back();
}

Buffer& Layer::add_buffer(const std::string& name, const Shape& shape, Init init) {
  auto b = std::make_unique<Buffer>();
  b->name = name;
  kernels::MemoryKindScope kind(kernels::MemoryKind::Parameters);
  b->value = Tensor::zeros(shape, kernels::DType::F32, device_);
  b->init = init;
  buffers_.push_back(std::move(b));
  return *buffers_.back();
}

Layer& Layer::add_child(const std::string& name, std::unique_ptr<Layer> layer) {
  PW_CHECK(layer != nullptr, "add_child(" << name << "): null layer");
  layer->to(device_);
  children_.emplace_back(name, std::move(layer));
  return *children_.back().second;
}

Tensor Layer::example_input(const Shape& shape, kernels::Device device, std::uint64_t seed) const {
  Rng rng(seed);
  std::vector<float> values(static_cast<std::size_t>(kernels::shape_numel(shape)));
  for (auto& v : values) v = static_cast<float>(rng.uniform(-1.0, 1.0));
  return Tensor::from_vector(values, shape, device);
}

}  // namespace pw::models
