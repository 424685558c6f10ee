#pragma once
// Model weights (parameters and buffers, by dotted name) in the safetensors layout.
#include <string>
#include <vector>

#include "models/layer.h"

namespace pw::models {

void save_weights(Layer& model, const std::string& path, const std::string& model_name);
// The same for a model held in pieces (the stages of a pipeline), named as the whole model.
void save_weights(const std::vector<Layer*>& pieces, const std::string& path, const std::string& model_name);

// Exact: the file holds exactly the model's tensors. Part: the model is one piece of the model
// the file holds (a pipeline stage), so the file may hold more.
enum class Coverage { Exact, Part };

// Every tensor the model has must be in the file with the same shape; missing names (and with
// Coverage::Exact extra ones) or a shape mismatch are an InputError naming the tensor. The model
// is unchanged on error.
void load_weights(Layer& model, const std::string& path, Coverage coverage = Coverage::Exact);

}  // namespace pw::models
