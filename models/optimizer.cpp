#include "models/optimizer.h"

#include "kernels/allocator.h"

namespace pw::models {

OptimizerKind parse_optimizer_kind(const std::string& name) { return parse_enum<OptimizerKind>(name); }

std::string optimizer_kind_name(OptimizerKind kind) { return std::string(enum_name(kind)); }

Optimizer::Optimizer(std::vector<Parameter*> params, OptimizerConfig config)
    : params_(std::move(params)), config_(config) {
  PW_INPUT_CHECK(config.lr > 0, "learning rate must be > 0, got " << config.lr);
  kernels::MemoryKindScope kind(kernels::MemoryKind::OptimizerState);
  for (auto* p : params_) {
    State s;
    const auto zeros = [&] { return Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device()); };
    s.a = zeros();
    if (config.kind == OptimizerKind::Adam) s.b = zeros();
    state_.emplace(p, std::move(s));
  }
}

void Optimizer::step() {
  ++step_;
  for (auto* p : params_) {
    State& s = state_.at(p);
    switch (config_.kind) {
      case OptimizerKind::Sgd:
        kernels::sgd_update(p->value, p->grad, s.a, {config_.lr, config_.momentum, config_.weight_decay}, step_);
        break;
      case OptimizerKind::Adam:
        kernels::adam_update(p->value, p->grad, s.a, s.b,
                             {config_.lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay}, step_);
        break;
      case OptimizerKind::Adagrad:
        kernels::adagrad_update(p->value, p->grad, s.a, {config_.lr, 1e-10, config_.weight_decay});
        break;
    }
  }
}

std::vector<Tensor*> Optimizer::changed_by_step() {
  std::vector<Tensor*> out;
  for (auto* p : params_) out.push_back(&p->value);
  for (auto* p : params_) {
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

void Optimizer::zero_grad() {
  for (auto* p : params_) p->grad.zero_();
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::named_state(
    const std::vector<std::pair<std::string, Parameter*>>& named_params) {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (const auto& [name, p] : named_params) {
    auto it = state_.find(p);
    if (it == state_.end()) continue;
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
