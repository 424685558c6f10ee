#pragma once
// Containers: Sequential (children in order) and Residual (a main branch plus an optional
// projection shortcut, added, then ReLU: ResNet's BasicBlock and Bottleneck).
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "models/layer.h"

namespace pw::models {

class Sequential : public Layer {
 public:
  Sequential() = default;
  Sequential& add(const std::string& name, std::unique_ptr<Layer> layer);
  std::size_t size() const { return children_.size(); }
  Layer& at(std::size_t i) { return *children_.at(i).second; }
  std::string type_name() const override { return "Sequential"; }
  InputRounding input_rounding() const override {
    return children().empty() ? InputRounding::None : children().front().second->input_rounding();
  }
  std::int64_t activation_elements(const Shape& input) const override;
  Tensor example_input(const Shape& shape, kernels::Device device, std::uint64_t seed) const override {
    return children().empty() ? Layer::example_input(shape, device, seed)
                              : children().front().second->example_input(shape, device, seed);
  }

  // Called after each child has added its parameter gradients in a backward (the full one or the
  // weight half), last child first: data-parallel training starts reducing those gradients while
  // the earlier children still run. Empty: no calls.
  using BackwardHook = std::function<void(Layer& child)>;
  void set_backward_hook(BackwardHook hook) { backward_hook_ = std::move(hook); }
  // Called before each child's forward (every mode), first child first: with sharded optimizer
  // state a child waits there for its own weights' all-gather only, while later buckets still
  // travel. Empty: no calls.
  using ForwardHook = std::function<void(const std::string& name, Layer& child)>;
  void set_forward_hook(ForwardHook hook) { forward_hook_ = std::move(hook); }

  // Selective recomputation (torch.utils.checkpoint on chosen layers): in a training forward the
  // children named here keep no context; a run of them keeps only its input, and its backward
  // first re-runs the run's forwards (Mode::Recompute, the same forward key) to rebuild them.
  // Names that are not children here are ignored (each stage holds some of a model's layers).
  void set_recomputed_children(const std::set<std::string>& names);
  bool recomputes_child(std::size_t i) const { return i < recomputed_.size() && recomputed_[i]; }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  void backward_weight_impl(Context& ctx, const Tensor& grad_y) override;
  Tensor backward_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;

 private:
  BackwardHook backward_hook_;
  ForwardHook forward_hook_;
  // Re-runs the forwards of the run of recomputed children that ends at child `last`.
  void rebuild_run(Context& ctx, std::size_t last);

  std::vector<bool> recomputed_;   // per child; empty: none
  std::uint64_t keyless_forwards_ = 0;
};

class Residual : public Layer {
 public:
  // `main` layers are registered directly under this block's name (conv1, bn1, ...), the
  // shortcut (when given) as "downsample", matching torchvision's parameter names.
  Residual(std::vector<std::pair<std::string, std::unique_ptr<Layer>>> main, std::unique_ptr<Layer> shortcut);
  std::string type_name() const override { return "Residual"; }
  std::int64_t activation_elements(const Shape& input) const override;

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  void backward_weight_impl(Context& ctx, const Tensor& grad_y) override;
  Tensor backward_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;

 private:
  std::size_t main_count_;
  Layer* shortcut_ = nullptr;
};

}  // namespace pw::models
