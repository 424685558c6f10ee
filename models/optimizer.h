#pragma once
// Optimizers over a set of parameters, with per-parameter state on the parameter's device.
// Formulas are torch.optim's, so runs can be compared with PyTorch step for step.
#include <memory>
#include <optional>
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
  // Host: the state lives in host memory, outside the device's cap, and the update runs there
  // (models/host_offload.h); the results are the same bits.
  OptimizerOffload offload = OptimizerOffload::None;
};

// "sgd", "adam", "adagrad"; anything else is an InputError listing them.
OptimizerKind parse_optimizer_kind(const std::string& name);
std::string optimizer_kind_name(OptimizerKind kind);

// Elements [offset, offset + length) of a parameter in flat order: the part of it one replica
// updates when the optimizer state is sharded (dataparallel/bucket_reducer.h).
struct ParameterSlice {
  Parameter* parameter = nullptr;
  std::int64_t offset = 0;
  std::int64_t length = 0;
  // Mixed precision with sharded state: the fp32 master copy of these elements ({length}), which
  // the optimizer updates and then rounds into the parameter's value (there the 16-bit weights);
  // on the device, or in host memory with --offload-optimizer. Undefined otherwise: the optimizer
  // updates the value's elements themselves.
  Tensor master;
};

// Copies of everything one Optimizer::step changes: each parameter's value (the fp32 master copy
// under mixed precision), the slices' master copies, the optimizer state and the step count. Restoring one undoes the steps
// made since, bit for bit.
struct OptimizerSnapshot {
  std::vector<Tensor> tensors;   // the values in parameter order, then each parameter's state
  std::int64_t steps = 0;
};

class HostOffload;

class Optimizer {
 public:
  // Updates every parameter of `params`, with state shaped as each. Offloaded under mixed precision,
  // a parameter whose layers compute with a 16-bit copy of its fp32 value gets its fp32 master moved
  // into host memory here: its value becomes that 16-bit copy (see master_of).
  Optimizer(std::vector<Parameter*> params, OptimizerConfig config);
  // Sharded: updates and holds state for the `whole` parameters (state shaped as each) and the
  // `slices` (at most one per parameter; state of {length}, in the master's dtype where the slice
  // has one), nothing for the rest; zero_grad still zeroes every gradient of `params`.
  Optimizer(std::vector<Parameter*> params, const std::vector<Parameter*>& whole,
            const std::vector<ParameterSlice>& slices, OptimizerConfig config);
  ~Optimizer();
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

  // Optimizer state by parameter ("<param>.momentum", "<param>.exp_avg", ...) for checkpoints:
  // the parameters updated whole (a slice's state is not a parameter's; see state_of).
  std::vector<std::pair<std::string, Tensor*>> named_state(
      const std::vector<std::pair<std::string, Parameter*>>& named_params);
  // The fp32 master this optimizer keeps of `p` (mixed precision: a sharded slice's, or, offloaded,
  // a whole weight's, whose value is then its 16-bit weights), with the elements it covers; nullopt
  // where it keeps none (the parameter's value is the fp32 weights).
  std::optional<ParameterSlice> master_of(Parameter* p) const;
  // The names' endings of each parameter's state, in state_of's order (".exp_avg", ".exp_avg_sq").
  std::vector<std::string> state_suffixes() const;
  // The slice of `p` this optimizer updates (nullopt: none, or `p` is updated whole) and its state
  // tensors ({length} each), in state_suffixes' order.
  std::optional<ParameterSlice> slice_of(Parameter* p) const;
  std::vector<Tensor*> slice_state(Parameter* p);
  // Bytes of optimizer state this optimizer holds (what sharding divides by the replica count).
  std::int64_t state_bytes() const;

 private:
  struct State {
    ParameterSlice slice;
    bool sliced = false;   // state of the slice only; otherwise shaped as the parameter
    Tensor a, b;   // SGD: momentum buffer; Adam: exp_avg, exp_avg_sq; Adagrad: sum of squares
  };
  std::vector<Tensor*> changed_by_step();   // what snapshot copies, in its order

  void make_state(const ParameterSlice& slice, bool sliced);
  void update(State& s, Tensor& value, const Tensor& grad);
  void step_offloaded();
  // What the update writes: the parameter, its slice, or the slice's fp32 master copy.
  static Tensor update_target(Parameter* p, const State& s);
  // With a master in host memory: the 16-bit weights the host rounds it into (the value, or its
  // slice); undefined otherwise.
  static Tensor rounded_target(Parameter* p, const State& s);
  static void round_master(Parameter* p, const State& s);
  std::vector<Parameter*> params_;
  std::vector<Parameter*> updated_;   // in update order
  OptimizerConfig config_;
  std::unordered_map<Parameter*, State> state_;
  std::int64_t step_ = 0;
  std::unique_ptr<HostOffload> offload_;   // with OptimizerOffload::Host
};

}  // namespace pw::models
