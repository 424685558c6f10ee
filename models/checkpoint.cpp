#include "models/checkpoint.h"

#include <cstdint>

#include "kernels/safetensors.h"

namespace pw::models {

namespace {

// Whether every value of a host tensor is finite (integers always are): by the exponent bits, so
// no copy is made.
bool all_finite(const Tensor& t) {
  const auto n = static_cast<std::size_t>(t.numel());
  const auto none_all_ones = [n](const auto* bits, auto mask) {
    for (std::size_t i = 0; i < n; ++i)
      if ((bits[i] & mask) == mask) return false;
    return true;
  };
  switch (t.dtype()) {
    case kernels::DType::F32: return none_all_ones(static_cast<const std::uint32_t*>(t.raw()), std::uint32_t{0x7f800000u});
    case kernels::DType::F64:
      return none_all_ones(static_cast<const std::uint64_t*>(t.raw()), std::uint64_t{0x7ff0000000000000ull});
    case kernels::DType::BF16: return none_all_ones(static_cast<const std::uint16_t*>(t.raw()), std::uint16_t{0x7f80u});
    case kernels::DType::F16: return none_all_ones(static_cast<const std::uint16_t*>(t.raw()), std::uint16_t{0x7c00u});
    default: return true;
  }
}

}  // namespace

void save_weights(Layer& model, const std::string& path, const std::string& model_name) {
  save_weights(std::vector<Layer*>{&model}, path, model_name);
}

void save_weights(const std::vector<Layer*>& pieces, const std::string& path, const std::string& model_name) {
  kernels::NamedTensors tensors;
  for (Layer* piece : pieces) {
    for (auto& [name, p] : piece->named_parameters()) tensors.emplace(name, p->value);
    for (auto& [name, b] : piece->named_buffers()) tensors.emplace(name, b->value);
  }
  save_named_weights(tensors, path, model_name);
}

void save_named_weights(const kernels::NamedTensors& tensors, const std::string& path, const std::string& model_name) {
  kernels::save_safetensors(path, tensors, {{"format", "pt"}, {"pipewright_model", model_name}});
}

void load_weights(Layer& model, const std::string& path) { load_weights(std::vector<Layer*>{&model}, path); }

void load_weights(const std::vector<Layer*>& pieces, const std::string& path, WeightCoverage coverage) {
  const auto tensors = kernels::load_safetensors(path);
  std::vector<std::pair<Tensor*, const Tensor*>> assignments;
  std::size_t expected = 0;
  const auto match = [&](const std::string& name, Tensor& target) {
    ++expected;
    auto it = tensors.find(name);
    PW_INPUT_CHECK(it != tensors.end(), "'" << path << "' has no tensor '" << name << "'; is it a checkpoint of this model?");
    PW_INPUT_CHECK(it->second.shape() == target.shape() && it->second.dtype() == target.dtype(),
                   "'" << path << "': tensor '" << name << "' is " << it->second.describe() << " but the model needs "
                       << kernels::dtype_name(target.dtype()) << kernels::shape_str(target.shape()));
    // Weights that are NaN or infinite would train to nothing (every step non-finite): refused
    // here, naming the tensor, rather than ending as a job that did not train.
    PW_INPUT_CHECK(all_finite(it->second), "'" << path << "': tensor '" << name
                                               << "' holds non-finite values (NaN or infinity); give weights that are "
                                                  "finite numbers");
    assignments.emplace_back(&target, &it->second);
  };
  for (Layer* piece : pieces) {
    for (auto& [name, p] : piece->named_parameters()) match(name, p->value);
    for (auto& [name, b] : piece->named_buffers()) match(name, b->value);
  }
  PW_INPUT_CHECK(coverage == WeightCoverage::Part || tensors.size() == expected, "'" << path << "' holds " << tensors.size() << " tensors but the model has "
                                                 << expected << "; is it a checkpoint of this model?");
  for (auto& [target, source] : assignments) target->copy_from(*source);
}

}  // namespace pw::models
