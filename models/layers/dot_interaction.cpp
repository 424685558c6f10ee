#include "models/layers/dot_interaction.h"

namespace pw::models {
namespace {

using kernels::DType;

struct InteractionContext : Context {
  Tensor x;
};

Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

template <typename T>
void interact(const T* x, std::int64_t n, int v, int d, int out_w, T* y) {
  for (std::int64_t s = 0; s < n; ++s) {
    const T* z = x + s * v * d;
    T* o = y + s * out_w;
    for (int k = 0; k < d; ++k) o[k] = z[k];
    int p = d;
    for (int i = 1; i < v; ++i) {
      for (int j = 0; j < i; ++j) {
        T dot = 0;
        for (int k = 0; k < d; ++k) dot += z[i * d + k] * z[j * d + k];
        o[p++] = dot;
      }
    }
  }
}

template <typename T>
void interact_backward(const T* x, const T* g, std::int64_t n, int v, int d, int out_w, T* gx) {
  for (std::int64_t s = 0; s < n; ++s) {
    const T* z = x + s * v * d;
    const T* go = g + s * out_w;
    T* gz = gx + s * v * d;
    for (int k = 0; k < v * d; ++k) gz[k] = 0;
    for (int k = 0; k < d; ++k) gz[k] = go[k];
    int p = d;
    for (int i = 1; i < v; ++i) {
      for (int j = 0; j < i; ++j) {
        const T gp = go[p++];
        for (int k = 0; k < d; ++k) {
          gz[i * d + k] += gp * z[j * d + k];
          gz[j * d + k] += gp * z[i * d + k];
        }
      }
    }
  }
}

}  // namespace

DotInteraction::DotInteraction(int vectors, int dim) : vectors_(vectors), dim_(dim) {
  PW_INPUT_CHECK(vectors >= 1 && dim >= 1, "DotInteraction needs at least one vector of width >= 1, got "
                                               << vectors << " x " << dim);
}

Shape DotInteraction::output_shape_impl(const Shape& input) const {
  PW_INPUT_CHECK(input.size() == 2 && input[1] == static_cast<std::int64_t>(vectors_) * dim_,
                 "DotInteraction(" << vectors_ << " x " << dim_ << ") expects [N, " << vectors_ * dim_ << "], got "
                                   << shape_str(input));
  return {input[0], output_width()};
}

Layer::Output DotInteraction::forward_impl(const Tensor& x, Mode mode) {
  PW_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64, "DotInteraction: input " << x.describe());
  const Tensor h = on_host(x);
  const std::int64_t n = x.dim(0);
  Tensor y = Tensor::empty({n, output_width()}, x.dtype(), h.device());
  if (x.dtype() == DType::F64) {
    interact(h.data<double>(), n, vectors_, dim_, output_width(), y.data<double>());
  } else {
    interact(h.data<float>(), n, vectors_, dim_, output_width(), y.data<float>());
  }
  auto ctx = std::make_unique<InteractionContext>();
  if (mode != Mode::Eval) ctx->x = x;
  return {y.to(x.device()), std::move(ctx)};
}

Tensor DotInteraction::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<InteractionContext&>(ctx);
  PW_CHECK(c.x.defined(), "DotInteraction.backward after an eval-mode forward");
  PW_CHECK(grad_y.dtype() == c.x.dtype(), "DotInteraction.backward: gradient " << grad_y.describe() << " for input "
                                                                               << c.x.describe());
  const Tensor h = on_host(c.x), g = on_host(grad_y);
  const std::int64_t n = h.dim(0);
  Tensor gx = Tensor::empty(h.shape(), h.dtype(), h.device());
  if (h.dtype() == DType::F64) {
    interact_backward(h.data<double>(), g.data<double>(), n, vectors_, dim_, output_width(), gx.data<double>());
  } else {
    interact_backward(h.data<float>(), g.data<float>(), n, vectors_, dim_, output_width(), gx.data<float>());
  }
  c.x = Tensor();
  return gx.to(grad_y.device());
}

}  // namespace pw::models
