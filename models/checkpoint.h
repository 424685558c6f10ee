#pragma once
// Model weights (parameters and buffers, by dotted name) in the safetensors layout.
#include <string>
#include <vector>

#include "kernels/safetensors.h"
#include "models/layer.h"

namespace pw::models {

void save_weights(Layer& model, const std::string& path, const std::string& model_name);
// The same for a model held in pieces (the stages of a pipeline), named as the whole model.
void save_weights(const std::vector<Layer*>& pieces, const std::string& path, const std::string& model_name);

// Tensors already named as the whole model (gathered from the stages of a multi-process job).
void save_named_weights(const kernels::NamedTensors& tensors, const std::string& path, const std::string& model_name);

// Whether the pieces given must account for every tensor of the file (a whole model) or are
// one part of it (one stage of a multi-process job).
enum class WeightCoverage { Whole, Part };

// Every tensor the model has must be in the file with the same shape, and the file must hold no
// others; a missing or extra name or a shape mismatch is an InputError naming the tensor. The
// model is unchanged on error.
void load_weights(Layer& model, const std::string& path);
// The same for a model held in pieces (the stages of a pipeline): the pieces together must
// account for every tensor of the file, read once.
void load_weights(const std::vector<Layer*>& pieces, const std::string& path,
                  WeightCoverage coverage = WeightCoverage::Whole);

}  // namespace pw::models
