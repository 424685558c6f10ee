#pragma once
// Model weights (parameters and buffers, by dotted name) in the safetensors layout.
#include <string>

#include "models/layer.h"

namespace pw::models {

void save_weights(Layer& model, const std::string& path, const std::string& model_name);
// Every tensor the model has must be in the file with the same shape; extra or missing names,
// or a shape mismatch, are an InputError naming the tensor. The model is unchanged on error.
void load_weights(Layer& model, const std::string& path);

}  // namespace pw::models
