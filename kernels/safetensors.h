#pragma once
// The safetensors layout: 8-byte little-endian header length, a JSON header mapping each name to
// {dtype, shape, data_offsets}, then the raw little-endian bytes. PyTorch users read it with the
// `safetensors` package; our PyTorch golden script writes it with plain json + struct.
#include <map>
#include <string>

#include "kernels/tensor.h"

namespace pw::kernels {

using NamedTensors = std::map<std::string, Tensor>;

// Writes to `path` through a temporary file renamed into place, so an interrupted save never
// leaves a half-written file where a good one was. `metadata` goes under "__metadata__".
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor onto the CPU. A missing, truncated or malformed file throws InputError
// naming the file and what was expected.
NamedTensors load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

}  // namespace pw::kernels
