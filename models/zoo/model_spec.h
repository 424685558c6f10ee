#pragma once
// The model zoo as flat lists of named layer factories (LayerSpec): a whole model is built by
// running every factory; a pipeline stage runs only its own range.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/layer.h"
#include "models/layers/sequential.h"

namespace pw::models {

struct LayerSpec {
  std::string name;   // top-level name, the prefix of its parameters ("layer2.1")
  std::function<std::unique_ptr<Layer>()> build;
};

struct ModelOptions {
  int width = 64;                 // ResNet base width (w, 2w, 4w, 8w); VGG widths scale by width/64
  Shape sample_shape{1, 28, 28};  // {C, H, W} of one input sample
  int num_classes = 10;
  double dropout = 0.5;           // VGG classifier
  std::uint64_t seed = 0;         // dropout masks
};

struct ModelSpec {
  std::string name;
  Shape sample_shape;
  int num_classes = 0;
  std::vector<LayerSpec> layers;
};

// "seed-cnn", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vgg16".
// Inputs of at most 64x64 get the small (CIFAR-style) form, larger ones the ImageNet form.
ModelSpec make_model_spec(const std::string& name, const ModelOptions& options);
std::vector<std::string> model_names();

// Builds every layer into one Sequential (names from the specs), initialised from `seed`.
std::unique_ptr<Sequential> build_model(const ModelSpec& spec, std::uint64_t seed);

struct ModelStats {
  std::int64_t parameters = 0;
  std::int64_t activation_bytes_per_sample = 0;   // F32 outputs of every layer for one sample
};
ModelStats model_stats(const ModelSpec& spec);

}  // namespace pw::models
