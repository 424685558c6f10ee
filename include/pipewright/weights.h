#pragma once
// Trained weights on the host, by parameter name ("conv1.weight", "layer2.0.bn1.running_mean"):
// what FitOptions::save_path (--save) writes and JobConfig::load_path (--load) reads. The file is
// safetensors, so PyTorch reads it with the `safetensors` package and the same names.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pw::train {

struct WeightTensor {
  std::vector<std::int64_t> shape;
  std::vector<float> values;   // row-major, shape's product many
};
using Weights = std::map<std::string, WeightTensor>;

// Every tensor of a safetensors file as floats (F32, F64, BF16 and F16 converted). InputError
// naming the file when it is missing, truncated or malformed, or holds an integer tensor.
Weights load_weights(const std::string& path);

// Writes F32 tensors durably (a temporary file, fsync, rename: an interrupted save leaves the old
// file). InputError naming the tensor whose values do not match its shape.
void save_weights(const std::string& path, const Weights& weights);

}  // namespace pw::train
