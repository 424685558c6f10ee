#pragma once
// Model weights (parameters and buffers, by dotted name) in the safetensors layout.
#include <string>
#include <vector>

#include "models/layer.h"

namespace pw::models {

void save_weights(Layer& model, const std::string& path, const std::string& model_name);
// The same for a model held in pieces (the stages of a pipeline), named as the whole model.
void save_weights(const std::vector<Layer*>& pieces, const std::string& path, const std::string& model_name);

// Every tensor the model has must be in the file with the same shape, and the file must hold no
// others; a missing or extra name or a shape mismatch is an InputError naming the tensor. The
// model is unchanged on error.
void load_weights(Layer& model, const std::string& path);
// The same for a model held in pieces (the stages of a pipeline): the pieces together must
// account for every tensor of the file, read once.
void load_weights(const std::vector<Layer*>& pieces, const std::string& path);

}  // namespace pw::models
