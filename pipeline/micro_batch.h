#pragma once
// Splitting a mini-batch into micro-batches along the batch dimension.
#include <vector>

#include "kernels/tensor.h"

namespace pw::pipeline {

// `count` equal slices of a CPU tensor's first dimension, as views of its storage (no copy: pinned
// loader buffers stay pinned); a size that does not divide is an
// InputError naming both numbers.
std::vector<kernels::Tensor> split_batch(const kernels::Tensor& t, int count);

}  // namespace pw::pipeline
