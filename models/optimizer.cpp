#include "models/optimizer.h"

#include "kernels/allocator.h"
#include "kernels/ops/half_support.h"
#include "kernels/ops/host_optimizer.h"
#include "models/host_offload.h"

namespace pw::models {

OptimizerKind parse_optimizer_kind(const std::string& name) { return parse_enum<OptimizerKind>(name); }

std::string optimizer_kind_name(OptimizerKind kind) { return std::string(enum_name(kind)); }

Optimizer::Optimizer(std::vector<Parameter*> params, OptimizerConfig config)
    : params_(std::move(params)), config_(config) {
  PW_INPUT_CHECK(config.lr > 0, "learning rate must be > 0, got " << config.lr);
  for (auto* p : params_) make_state({p, 0, p->value.numel()}, false);
}

Optimizer::Optimizer(std::vector<Parameter*> params, const std::vector<Parameter*>& whole,
                     const std::vector<ParameterSlice>& slices, OptimizerConfig config)
    : params_(std::move(params)), config_(config) {
  PW_INPUT_CHECK(config.lr > 0, "learning rate must be > 0, got " << config.lr);
  for (auto* p : whole) make_state({p, 0, p->value.numel()}, false);
  for (const auto& slice : slices) {
    PW_CHECK(slice.parameter != nullptr && slice.offset >= 0 && slice.length > 0 &&
                 slice.offset + slice.length <= slice.parameter->value.numel(),
             "optimizer slice [" << slice.offset << ", " << slice.offset + slice.length << ") of a parameter of "
                                 << (slice.parameter ? slice.parameter->value.numel() : 0) << " elements");
    PW_CHECK(!state_.count(slice.parameter), "two optimizer slices of parameter '" << slice.parameter->name << "'");
    PW_CHECK(!slice.master.defined() ||
                 (slice.master.numel() == slice.length &&
                  (slice.master.device() == slice.parameter->value.device() || slice.master.is_host_memory())),
             "master copy " << slice.master.describe() << " of a slice of " << slice.length << " elements of '"
                            << slice.parameter->name << "'");
    make_state(slice, true);
  }
}

Optimizer::~Optimizer() = default;

namespace {

// Mixed precision, not sharded: a weight whose layers compute with its 16-bit copy, and whose fp32
// value is the master that copy is made from (models::Layer::set_precision), on the device or,
// built there (models::ParameterHome::Host), in host memory.
bool has_whole_master(const Parameter& p) {
  return p.compute.defined() && kernels::is_half(p.compute.dtype()) && p.value.dtype() == kernels::DType::F32 &&
         p.compute.raw() != p.value.raw();
}

}  // namespace

void Optimizer::make_state(const ParameterSlice& given, bool sliced) {
  ParameterSlice slice = given;
  Parameter* p = slice.parameter;
  const bool offloaded = config_.offload == OptimizerOffload::Host;
  if (offloaded) {
    // The parameters' device is their gradients' (a master in host memory held for a GPU is on cpu:0).
    const Device device = p->grad.device();
    if (!offload_) offload_ = std::make_unique<HostOffload>(device);
    PW_CHECK(offload_->device() == device, "offloaded optimizer over parameters on " << offload_->device().str()
                                                                                     << " and " << device.str());
    // Offloaded, the fp32 master lives in host memory beside the state, as a sharded one does
    // (dataparallel/bucket_reducer.h): the device keeps the 16-bit weights only, which are now
    // the parameter's value and its compute copy at once (as a sharded 16-bit weight is). A value
    // built in host memory is taken as it is; one on the device is copied out and goes.
    if (!sliced && has_whole_master(*p)) {
      if (p->value.is_host_memory()) {
        slice.master = p->value;
      } else {
        kernels::MemoryKindScope kind(kernels::MemoryKind::MasterWeights);
        slice.master = Tensor::empty_host(p->value.shape(), kernels::DType::F32, device);
        slice.master.copy_from(p->value);
      }
      p->value = p->compute;
    }
  }
  const Shape shape = sliced ? Shape{slice.length} : p->value.shape();
  const auto dtype = slice.master.defined() ? slice.master.dtype() : p->value.dtype();
  kernels::MemoryKindScope kind(kernels::MemoryKind::OptimizerState);
  State s;
  s.slice = slice;
  s.sliced = sliced;
  if (offloaded) {
    s.a = offload_->zeros(shape, dtype);
    if (config_.kind == OptimizerKind::Adam) s.b = offload_->zeros(shape, dtype);
  } else {
    s.a = Tensor::zeros(shape, dtype, p->value.device());
    if (config_.kind == OptimizerKind::Adam) s.b = Tensor::zeros(shape, dtype, p->value.device());
  }
  state_.emplace(p, std::move(s));
  updated_.push_back(p);
}

void Optimizer::step() {
  ++step_;
  if (offload_) {
    step_offloaded();
    return;
  }
  for (auto* p : updated_) {
    State& s = state_.at(p);
    Tensor value = update_target(p, s);
    const Tensor grad = !s.sliced ? p->grad : p->grad.view(s.slice.offset, {s.slice.length});
    update(s, value, grad);
    round_master(p, s);
  }
}

Tensor Optimizer::update_target(Parameter* p, const State& s) {
  if (s.slice.master.defined()) return s.slice.master;
  return s.sliced ? p->value.view(s.slice.offset, {s.slice.length}) : p->value;
}

Tensor Optimizer::rounded_target(Parameter* p, const State& s) {
  if (!s.slice.master.defined() || !s.slice.master.is_host_memory()) return Tensor();
  return s.sliced ? p->value.view(s.slice.offset, {s.slice.length}) : p->value;
}

void Optimizer::round_master(Parameter* p, const State& s) {
  // The 16-bit weights of the slice, rounded from the updated master as a compute copy would be.
  if (!s.slice.master.defined()) return;
  kernels::MemoryKindScope kind(kernels::MemoryKind::Workspace);
  p->value.view(s.slice.offset, {s.slice.length}).copy_from(s.slice.master.to(p->value.dtype()));
}

void Optimizer::step_offloaded() {
  std::vector<HostOffload::Item> items;
  std::vector<State*> states;
  for (auto* p : updated_) {
    State& s = state_.at(p);
    items.push_back({update_target(p, s), !s.sliced ? p->grad : p->grad.view(s.slice.offset, {s.slice.length}),
                     rounded_target(p, s)});
    states.push_back(&s);
  }
  // The host update: the vectorised CPU optimizer, the reference's bits.
  offload_->run(items, [&](std::size_t i, Tensor& value, const Tensor& grad) {
    State& s = *states[i];
    switch (config_.kind) {
      case OptimizerKind::Sgd:
        kernels::host_sgd_update(value, grad, s.a, {config_.lr, config_.momentum, config_.weight_decay}, step_);
        break;
      case OptimizerKind::Adam:
        kernels::host_adam_update(value, grad, s.a, s.b,
                                  {config_.lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay}, step_);
        break;
      case OptimizerKind::Adagrad:
        kernels::host_adagrad_update(value, grad, s.a, {config_.lr, 1e-10, config_.weight_decay});
        break;
    }
  });
  // Masters a caller kept on the device (a sharded reducer not told of the offload) were staged
  // like fp32 weights: their 16-bit weights are rounded there, as without offload.
  for (std::size_t i = 0; i < updated_.size(); ++i)
    if (!items[i].rounded.defined()) round_master(updated_[i], *states[i]);
}

void Optimizer::update(State& s, Tensor& value, const Tensor& grad) {
  switch (config_.kind) {
    case OptimizerKind::Sgd:
      kernels::sgd_update(value, grad, s.a, {config_.lr, config_.momentum, config_.weight_decay}, step_);
      break;
    case OptimizerKind::Adam:
      kernels::adam_update(value, grad, s.a, s.b,
                           {config_.lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay}, step_);
      break;
    case OptimizerKind::Adagrad:
      kernels::adagrad_update(value, grad, s.a, {config_.lr, 1e-10, config_.weight_decay});
      break;
  }
}

std::vector<Tensor*> Optimizer::changed_by_step() {
  std::vector<Tensor*> out;
  for (auto* p : params_) out.push_back(&p->value);
  for (auto* p : updated_)
    if (state_.at(p).slice.master.defined()) out.push_back(&state_.at(p).slice.master);
  for (auto* p : updated_) {   // sharded: only the parameters (and slices) this optimizer holds state for
    State& s = state_.at(p);
    if (s.a.defined()) out.push_back(&s.a);
    if (s.b.defined()) out.push_back(&s.b);
  }
  return out;
}

OptimizerSnapshot Optimizer::snapshot() {
  OptimizerSnapshot out;
  for (const Tensor* t : changed_by_step()) out.tensors.push_back(t->clone());
  out.steps = step_;
  return out;
}

void Optimizer::restore(const OptimizerSnapshot& saved) {
  const auto changed = changed_by_step();
  PW_CHECK(changed.size() == saved.tensors.size(), "an optimizer snapshot of " << saved.tensors.size()
                                                       << " tensors restored into an optimizer that changes "
                                                       << changed.size());
  for (std::size_t i = 0; i < changed.size(); ++i) changed[i]->copy_from(saved.tensors[i]);
  step_ = saved.steps;
}

std::vector<std::string> Optimizer::state_suffixes() const {
  switch (config_.kind) {
    case OptimizerKind::Sgd: return {".momentum_buffer"};
    case OptimizerKind::Adam: return {".exp_avg", ".exp_avg_sq"};
    case OptimizerKind::Adagrad: return {".sum"};
  }
  return {};
}

std::optional<ParameterSlice> Optimizer::master_of(Parameter* p) const {
  const auto it = state_.find(p);
  if (it == state_.end() || !it->second.slice.master.defined()) return std::nullopt;
  return it->second.slice;
}

std::optional<ParameterSlice> Optimizer::slice_of(Parameter* p) const {
  const auto it = state_.find(p);
  if (it == state_.end() || !it->second.sliced) return std::nullopt;
  return it->second.slice;
}

std::vector<Tensor*> Optimizer::slice_state(Parameter* p) {
  const auto it = state_.find(p);
  if (it == state_.end() || !it->second.sliced) return {};
  if (config_.kind == OptimizerKind::Adam) return {&it->second.a, &it->second.b};
  return {&it->second.a};
}

std::int64_t Optimizer::state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [p, s] : state_) bytes += static_cast<std::int64_t>(s.a.nbytes() + (s.b.defined() ? s.b.nbytes() : 0));
  return bytes;
}

void Optimizer::zero_grad() {
  for (auto* p : params_) p->grad.zero_();
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::named_state(
    const std::vector<std::pair<std::string, Parameter*>>& named_params) {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (const auto& [name, p] : named_params) {
    auto it = state_.find(p);
    if (it == state_.end() || it->second.sliced) continue;
    switch (config_.kind) {
      case OptimizerKind::Sgd: out.emplace_back(name + ".momentum_buffer", &it->second.a); break;
      case OptimizerKind::Adam:
        out.emplace_back(name + ".exp_avg", &it->second.a);
        out.emplace_back(name + ".exp_avg_sq", &it->second.b);
        break;
      case OptimizerKind::Adagrad: out.emplace_back(name + ".sum", &it->second.a); break;
    }
  }
  return out;
}

}  // namespace pw::models
