#pragma once
// The safetensors layout: 8-byte little-endian header length, a JSON header mapping each name to
// {dtype, shape, data_offsets}, then the raw little-endian bytes. PyTorch users read it with the
// `safetensors` package; our PyTorch golden script writes it with plain json + struct.
#include <cstdint>
#include <map>
#include <string>

#include "kernels/tensor.h"

namespace pw::kernels {

using NamedTensors = std::map<std::string, Tensor>;

// What was written: the file's size and checksum (core/durable_file.h), for manifests.
struct WrittenFile {
  std::int64_t bytes = 0;
  std::string checksum;
};

// Writes to `path` durably (temporary file, fsync, rename; core/durable_file.h), so an
// interrupted save never leaves a half-written file where a good one was. `metadata` goes under
// "__metadata__".
WrittenFile save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor onto the CPU. A missing, truncated or malformed file throws InputError
// naming the file and what was expected.
NamedTensors load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

}  // namespace pw::kernels
