// pipewright/weights.h over the safetensors reader and writer of kernels/.
#include "pipewright/weights.h"

#include "core/error.h"
#include "kernels/safetensors.h"

namespace pw::train {

Weights load_weights(const std::string& path) {
  Weights out;
  for (const auto& [name, tensor] : kernels::load_safetensors(path)) {
    const auto dtype = tensor.dtype();
    PW_INPUT_CHECK(dtype == kernels::DType::F32 || dtype == kernels::DType::F64 || dtype == kernels::DType::BF16 ||
                       dtype == kernels::DType::F16,
                   path << ": tensor '" << name << "' holds " << kernels::dtype_name(dtype)
                        << "; weights are F32, F64, BF16 or F16");
    out[name] = WeightTensor{tensor.shape(), tensor.to_float_vector()};
  }
  return out;
}

void save_weights(const std::string& path, const Weights& weights) {
  kernels::NamedTensors tensors;
  for (const auto& [name, w] : weights) {
    for (const auto d : w.shape) PW_INPUT_CHECK(d >= 0, "save_weights: tensor '" << name << "' has a negative dimension");
    PW_INPUT_CHECK(kernels::shape_numel(w.shape) == static_cast<std::int64_t>(w.values.size()),
                   "save_weights: tensor '" << name << "' has " << w.values.size() << " values for shape "
                                            << kernels::shape_str(w.shape) << " (" << kernels::shape_numel(w.shape)
                                            << " expected)");
    tensors.emplace(name, kernels::Tensor::from_vector(w.values, w.shape));
  }
  kernels::save_safetensors(path, tensors);
}

}  // namespace pw::train
