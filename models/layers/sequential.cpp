#include "models/layers/sequential.h"

#include "kernels/ops/activation.h"
#include "kernels/ops/elementwise.h"
#include "models/forward_key.h"
#include "models/rng.h"

namespace pw::models {
namespace {
struct ChainContext : Context {
  std::vector<std::unique_ptr<Context>> children;
  // Selective recomputation: the input of each run of recomputed children, at the run's first
  // child (empty elsewhere), and the forward key the training forward ran under.
  std::vector<Tensor> run_inputs;
  std::uint64_t forward_key = 0;
};

struct ResidualContext : Context {
  std::vector<std::unique_ptr<Context>> main;
  std::unique_ptr<Context> shortcut;
  Tensor y;   // output after the final ReLU
};

// Runs layers [begin, end) of `children` in order, collecting their contexts.
// In Eval mode nothing will run backward, so each child's context (and the activations it
// holds) goes as soon as the child is done.
Tensor run_chain(const std::vector<std::pair<std::string, std::unique_ptr<Layer>>>& children, std::size_t end,
                 Tensor x, Mode mode, std::vector<std::unique_ptr<Context>>& contexts,
                 const Sequential::ForwardHook* hook = nullptr) {
  for (std::size_t i = 0; i < end; ++i) {
    if (hook != nullptr && *hook) (*hook)(children[i].first, *children[i].second);
    auto out = children[i].second->forward(x, mode);
    if (mode != Mode::Eval) contexts.push_back(std::move(out.ctx));
    x = std::move(out.y);
  }
  return x;
}

enum class Half { Full, InputOnly };

using Hook = Sequential::BackwardHook;

// Called before child i's backward: rebuilds a context the forward did not keep.
using Rebuild = std::function<void(std::size_t i)>;

Tensor chain_backward(const std::vector<std::pair<std::string, std::unique_ptr<Layer>>>& children, std::size_t end,
                      std::vector<std::unique_ptr<Context>>& contexts, Tensor g, Half half, const Hook* hook = nullptr,
                      const Rebuild& rebuild = {}) {
  PW_CHECK(contexts.size() >= end, "backward after an eval-mode forward (its contexts were not kept)");
  for (std::size_t i = end; i-- > 0;) {
    Layer& layer = *children[i].second;
    if (!contexts[i] && rebuild) rebuild(i);
    g = half == Half::Full ? layer.backward(*contexts[i], g) : layer.backward_input(*contexts[i], g);
    if (half == Half::Full) {
      contexts[i].reset();
      if (hook != nullptr && *hook) (*hook)(layer);
    }
  }
  return g;
}

void chain_backward_weight(const std::vector<std::pair<std::string, std::unique_ptr<Layer>>>& children,
                           std::size_t end, std::vector<std::unique_ptr<Context>>& contexts, const Hook* hook = nullptr) {
  for (std::size_t i = end; i-- > 0;) {
    children[i].second->backward_weight(*contexts[i]);
    contexts[i].reset();
    if (hook != nullptr && *hook) (*hook)(*children[i].second);
  }
}
}  // namespace

Sequential& Sequential::add(const std::string& name, std::unique_ptr<Layer> layer) {
  add_child(name, std::move(layer));
  return *this;
}

Shape Sequential::output_shape_impl(const Shape& input) const {
  Shape s = input;
  for (const auto& [name, child] : children_) s = child->output_shape(s);
  return s;
}

std::int64_t Sequential::activation_elements(const Shape& input) const {
  std::int64_t total = 0;
  Shape s = input;
  for (const auto& [name, child] : children_) {
    total += child->activation_elements(s);
    s = child->output_shape(s);
  }
  return total;
}

void Sequential::set_recomputed_children(const std::set<std::string>& names) {
  recomputed_.assign(children_.size(), false);
  bool any = false;
  for (std::size_t i = 0; i < children_.size(); ++i) any |= recomputed_[i] = names.contains(children_[i].first);
  if (!any) recomputed_.clear();
}

Layer::Output Sequential::forward_impl(const Tensor& x, Mode mode) {
  auto ctx = std::make_unique<ChainContext>();
  if (mode != Mode::Train || recomputed_.empty()) {
    Tensor y = run_chain(children_, children_.size(), x, mode, ctx->children, &forward_hook_);
    return {std::move(y), std::move(ctx)};
  }
  // Random layers draw from the forward key; without one (a caller outside a pipeline) this
  // forward gets its own, so the rebuild draws what the first run drew.
  const auto key = current_forward_key();
  ctx->forward_key = key ? *key : splitmix64(++keyless_forwards_);
  ForwardKeyGuard guard(ctx->forward_key);
  ctx->run_inputs.resize(children_.size());
  Tensor h = x;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (forward_hook_) forward_hook_(children_[i].first, *children_[i].second);
    if (recomputes_child(i) && (i == 0 || !recomputes_child(i - 1))) ctx->run_inputs[i] = h;
    auto out = children_[i].second->forward(h, mode);
    ctx->children.push_back(recomputes_child(i) ? nullptr : std::move(out.ctx));
    h = std::move(out.y);
  }
  return {std::move(h), std::move(ctx)};
}

void Sequential::rebuild_run(Context& ctx, std::size_t last) {
  auto& c = static_cast<ChainContext&>(ctx);
  PW_CHECK(recomputes_child(last), "no context for child " << children_[last].first
                                                           << " (it does not recompute): backward after an eval-mode forward?");
  std::size_t first = last;
  while (first > 0 && recomputes_child(first - 1) && !c.children[first - 1]) --first;
  PW_CHECK(first < c.run_inputs.size() && c.run_inputs[first].defined(),
           "no kept input to recompute " << children_[first].first << ".." << children_[last].first << " from");
  ForwardKeyGuard guard(c.forward_key);
  Tensor h = std::move(c.run_inputs[first]);
  for (std::size_t j = first; j <= last; ++j) {
    auto out = children_[j].second->forward(h, Mode::Recompute);
    c.children[j] = std::move(out.ctx);
    h = std::move(out.y);
  }
}

Tensor Sequential::backward_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<ChainContext&>(ctx);
  return chain_backward(children_, children_.size(), c.children, grad_y, Half::Full, &backward_hook_,
                        [&](std::size_t i) { rebuild_run(ctx, i); });
}

Tensor Sequential::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<ChainContext&>(ctx);
  return chain_backward(children_, children_.size(), c.children, grad_y, Half::InputOnly, nullptr,
                        [&](std::size_t i) { rebuild_run(ctx, i); });
}

void Sequential::backward_weight_impl(Context& ctx, const Tensor&) {
  auto& c = static_cast<ChainContext&>(ctx);
  chain_backward_weight(children_, children_.size(), c.children, &backward_hook_);
}

Residual::Residual(std::vector<std::pair<std::string, std::unique_ptr<Layer>>> main, std::unique_ptr<Layer> shortcut)
    : main_count_(main.size()) {
  PW_CHECK(!main.empty(), "Residual needs a main branch");
  for (auto& [name, layer] : main) add_child(name, std::move(layer));
  if (shortcut) shortcut_ = &add_child("downsample", std::move(shortcut));
}

Shape Residual::output_shape_impl(const Shape& input) const {
  Shape s = input;
  for (std::size_t i = 0; i < main_count_; ++i) s = children_[i].second->output_shape(s);
  const Shape shortcut = shortcut_ ? shortcut_->output_shape(input) : input;
  PW_CHECK(s == shortcut, "Residual: main branch gives " << shape_str(s) << " but the shortcut gives "
                                                         << shape_str(shortcut));
  return s;
}

std::int64_t Residual::activation_elements(const Shape& input) const {
  std::int64_t total = 0;
  Shape s = input;
  for (std::size_t i = 0; i < main_count_; ++i) {
    total += children_[i].second->activation_elements(s);
    s = children_[i].second->output_shape(s);
  }
  if (shortcut_) total += shortcut_->activation_elements(input);
  return total + 2 * shape_numel(s);   // the sum and the final ReLU
}

Layer::Output Residual::forward_impl(const Tensor& x, Mode mode) {
  auto ctx = std::make_unique<ResidualContext>();
  Tensor main = run_chain(children_, main_count_, x, mode, ctx->main);
  Tensor skip = x;
  if (shortcut_) {
    auto out = shortcut_->forward(x, mode);
    if (mode != Mode::Eval) ctx->shortcut = std::move(out.ctx);
    skip = std::move(out.y);
  }
  Tensor y = kernels::relu_forward(kernels::add(main, skip));
  if (mode != Mode::Eval) ctx->y = y;
  return {std::move(y), std::move(ctx)};
}

Tensor Residual::backward_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<ResidualContext&>(ctx);
  Tensor g = kernels::relu_backward(c.y, grad_y);
  c.y = Tensor();
  Tensor gx = chain_backward(children_, main_count_, c.main, g, Half::Full);
  // Out of place: a main branch may hand back a view of its own gradient input.
  if (shortcut_) {
    gx = kernels::add(gx, shortcut_->backward(*c.shortcut, g));
    c.shortcut.reset();
    return gx;
  }
  return kernels::add(gx, g);
}

Tensor Residual::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<ResidualContext&>(ctx);
  Tensor g = kernels::relu_backward(c.y, grad_y);
  c.y = Tensor();
  Tensor gx = chain_backward(children_, main_count_, c.main, g, Half::InputOnly);
  return kernels::add(gx, shortcut_ ? shortcut_->backward_input(*c.shortcut, g) : g);
}

void Residual::backward_weight_impl(Context& ctx, const Tensor&) {
  auto& c = static_cast<ResidualContext&>(ctx);
  chain_backward_weight(children_, main_count_, c.main);
  if (shortcut_) {
    shortcut_->backward_weight(*c.shortcut);
    c.shortcut.reset();
  }
}

}  // namespace pw::models
