#pragma once
// Optimizers over a set of parameters, with per-parameter state on the parameter's device.
// Formulas are torch.optim's, so runs can be compared with PyTorch step for step.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "pipewright/enums.h"
#include "kernels/ops/optimizer.h"
#include "models/layer.h"

namespace pw::models {

// OptimizerKind and its names: pipewright/enums.h.

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::Sgd;
  double lr = 0.01;
  double momentum = 0.9;        // SGD
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;   // Adam (Adagrad uses eps too, default 1e-10)
};

// "sgd", "adam", "adagrad"; anything else is an InputError listing them.
OptimizerKind parse_optimizer_kind(const std::string& name);
std::string optimizer_kind_name(OptimizerKind kind);

// Copies of everything one Optimizer::step changes: each parameter's value (the fp32 master copy
// under mixed precision), its optimizer state and the step count. Restoring one undoes the steps
// made since, bit for bit.
struct OptimizerSnapshot {
  std::vector<Tensor> tensors;   // the values in parameter order, then each parameter's state
  std::int64_t steps = 0;
};

class Optimizer {
 public:
  Optimizer(std::vector<Parameter*> params, OptimizerConfig config);
  void step();        // applies one update from the accumulated gradients
  void zero_grad();
  std::int64_t steps() const { return step_; }
  // A resumed job continues the count (Adam's bias correction, SGD's first-step momentum).
  void set_steps(std::int64_t steps) { step_ = steps; }
  const OptimizerConfig& config() const { return config_; }
  void set_lr(double lr) { config_.lr = lr; }
  // Post-validation (pipeline/optimistic_update.h): saved before an update that may have to be
  // undone; the copies live on each tensor's device.
  OptimizerSnapshot snapshot();
  void restore(const OptimizerSnapshot& saved);

  // Optimizer state by parameter ("<param>.momentum", "<param>.exp_avg", ...) for checkpoints.
  std::vector<std::pair<std::string, Tensor*>> named_state(
      const std::vector<std::pair<std::string, Parameter*>>& named_params);

 private:
  struct State {
    Tensor a, b;   // SGD: momentum buffer; Adam: exp_avg, exp_avg_sq; Adagrad: sum of squares
  };
  std::vector<Tensor*> changed_by_step();   // what snapshot copies, in its order

  std::vector<Parameter*> params_;
  OptimizerConfig config_;
  std::unordered_map<Parameter*, State> state_;
  std::int64_t step_ = 0;
};

}  // namespace pw::models
