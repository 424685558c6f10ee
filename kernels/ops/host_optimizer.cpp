#include "kernels/ops/host_optimizer.h"

#include <initializer_list>

#include "kernels/cpu/float_types.h"
#include "kernels/cpu/parallel.h"
#include "kernels/runtime.h"

namespace pw::kernels {
namespace {

// Every tensor a host F32 tensor of the parameter's element count: the vectorised path applies.
// Anything else goes to the reference, which checks shapes, dtypes and devices itself.
bool vectorisable(const Tensor& param, std::initializer_list<const Tensor*> others) {
  if (param.dtype() != DType::F32 || !param.device().is_cpu()) return false;
  for (const Tensor* t : others)
    if (!t->defined() || t->dtype() != DType::F32 || !t->device().is_cpu() || t->numel() != param.numel() ||
        t->shape() != param.shape())
      return false;
  return true;
}

template <typename Body>
void over_chunks(const Tensor& param, const Body& body) {
  DeviceRuntime::get(param.device()).execute([&] { cpu::parallel_chunks(param.numel(), cpu::kElementGrain, body); });
}

}  // namespace

void host_sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p, std::int64_t step,
                     VectorIsa isa) {
  const bool momentum = p.momentum != 0.0;
  if (!vectorisable(param, momentum ? std::initializer_list<const Tensor*>{&grad, &momentum_buf}
                                    : std::initializer_list<const Tensor*>{&grad}) ||
      step < 1 || p.lr < 0.0 || p.momentum < 0.0 || p.weight_decay < 0.0) {
    sgd_update(param, grad, momentum_buf, p, step);
    return;
  }
  const auto c = cpu::sgd_step_constants(p, step);
  float* w = param.data<float>();
  const float* g = grad.data<float>();
  float* buf = momentum ? momentum_buf.data<float>() : nullptr;
  over_chunks(param, [&](std::int64_t begin, std::int64_t end) {
    cpu::sgd_update_f32(isa, w + begin, g + begin, buf ? buf + begin : nullptr, end - begin, c);
  });
}

void host_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p, std::int64_t step,
                      VectorIsa isa) {
  if (!vectorisable(param, {&grad, &m, &v}) || step < 1 || p.beta1 < 0.0 || p.beta1 >= 1.0 || p.beta2 < 0.0 ||
      p.beta2 >= 1.0 || p.lr < 0.0 || p.eps < 0.0 || p.weight_decay < 0.0) {
    adam_update(param, grad, m, v, p, step);
    return;
  }
  const auto c = cpu::adam_step_constants(p, step);
  float* w = param.data<float>();
  const float* g = grad.data<float>();
  float* ms = m.data<float>();
  float* vs = v.data<float>();
  over_chunks(param, [&](std::int64_t begin, std::int64_t end) {
    cpu::adam_update_f32(isa, w + begin, g + begin, ms + begin, vs + begin, end - begin, c);
  });
}

void host_adagrad_update(Tensor& param, const Tensor& grad, Tensor& sum_sq, const AdagradParams& p, VectorIsa isa) {
  if (!vectorisable(param, {&grad, &sum_sq}) || p.lr < 0.0 || p.eps < 0.0 || p.weight_decay < 0.0) {
    adagrad_update(param, grad, sum_sq, p);
    return;
  }
  const auto c = cpu::adagrad_step_constants(p);
  float* w = param.data<float>();
  const float* g = grad.data<float>();
  float* acc = sum_sq.data<float>();
  over_chunks(param, [&](std::int64_t begin, std::int64_t end) {
    cpu::adagrad_update_f32(isa, w + begin, g + begin, acc + begin, end - begin, c);
  });
}

void host_round(const Tensor& master, Tensor& weights) {
  PW_CHECK(master.dtype() == DType::F32 && master.device().is_cpu() && weights.device().is_cpu() &&
               (weights.dtype() == DType::BF16 || weights.dtype() == DType::F16) && weights.numel() == master.numel(),
           "rounding " << master.describe() << " into " << weights.describe()
                       << ": an F32 host tensor into a BF16 or F16 host tensor of as many elements");
  const float* src = master.data<float>();
  cpu::visit_any_float(weights.dtype(), "host_round", [&](auto tag) {
    using To = decltype(tag);
    To* dst = weights.data<To>();
    over_chunks(master, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) dst[i] = cpu::store<To>(static_cast<cpu::compute_t<To>>(src[i]));
    });
  });
}

}  // namespace pw::kernels
