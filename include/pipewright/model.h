#pragma once
// A model as a program describes it: a flat list of named layer factories (so each rank builds
// only its own stage's layers), the stages' first layers, and weights shared by several layers.
//
//   pw::partition::ModelDescription m;
//   m.name = "my-cnn";
//   m.sample_shape = {1, 28, 28};
//   m.num_classes = 10;
//   m.layers = {pw::layers::conv2d("conv1", 1, 16, 3, 1, 1), pw::layers::relu("relu1"), ...};
//   m.split_points = pw::partition::split_before(m, {"conv2", "fc1"});   // three stages
//
// The layer factories are in pipewright/layers.h; a model from the zoo is describe_zoo_model().
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/loss.h"

namespace pw::models {

class Layer;   // built by a LayerSpec inside the library

enum class Bias { No, Yes };
// TorchDefault: weights and biases uniform in ±1/sqrt(fan_in) (PyTorch's nn.Conv2d / nn.Linear).
// GlorotUniform: weights uniform in ±sqrt(6/(fan_in+fan_out)), biases zero (Keras' default).
enum class WeightInit { TorchDefault, GlorotUniform };
// How an embedding bag pools the rows of one sample's ids.
enum class BagMode { Sum, Mean };
// Where an embedding table's rows live: in the layer (a parameter like any other), or on the job's
// parameter servers (sharded by id, updated there by the sparse optimizer; the job must have them).
enum class TablePlacement { Local, ParameterServers };

struct LayerSpec {
  std::string name;   // top-level name, the prefix of its parameters ("layer2.1" -> "layer2.1.conv1.weight")
  std::function<std::unique_ptr<Layer>()> build;
  // The dotted names of the embedding tables this layer keeps on parameter servers, filled by
  // pw::layers::embedding_bag and the zoo (not by hand): the job checks them against its servers
  // before anything is built, and the servers' summary reports these tables.
  std::vector<std::string> server_tables = {};
  // How many parameters (elements) building it makes, known without building it: the zoo fills it
  // (a layer's tables on parameter servers are not its parameters). -1: not known until built. The
  // job counts the weights, gradients and optimizer state from it before anything is allocated, and
  // refuses a model that could never fit; an unknown count is taken as 0 there.
  std::int64_t parameters = -1;
};

// Every table the model keeps on parameter servers, in layer order.
std::vector<std::string> server_tables_of(const std::vector<LayerSpec>& layers);

}  // namespace pw::models

namespace pw::partition {

// One weight used by several layers, possibly on different stages (an input embedding reused as
// the output projection). Each holding stage keeps a copy; their gradients are summed before the
// optimizer step.
struct TiedSpec {
  std::string name;
  std::vector<std::string> parameters;   // dotted parameter names: "fc_in.weight", "fc_out.weight"
};

struct ModelDescription {
  std::string name;
  std::vector<std::int64_t> sample_shape;   // {C, H, W}
  int num_classes = 0;
  std::vector<models::LayerSpec> layers;
  // Optional: the first layer index of stages 1..P-1. Not part of the job's identity: a checkpoint
  // resumes under another split.
  std::vector<int> split_points;
  std::vector<TiedSpec> tied;
  // The program's own loss (pipewright/loss.h); empty: softmax cross-entropy. Its name goes into the
  // job's identity ("program" when empty), its code cannot.
  models::LossFunction loss;
  std::string loss_name;

  int layer_count() const { return static_cast<int>(layers.size()); }
};

// The index of the layer called `name`; InputError naming the model and listing what it has otherwise.
int layer_index(const ModelDescription& model, std::string_view name);

// Split points that start a stage at each named layer, in the order given (which must follow the
// layers' order); InputError for an unknown name, the first layer, or names out of order.
std::vector<int> split_before(const ModelDescription& model, const std::vector<std::string>& first_layers);

struct ZooOptions {
  int width = 64;                                     // ResNet base width / VGG width scale
  std::vector<std::int64_t> sample_shape{1, 28, 28};  // {C, H, W}; at most 64x64 gets the CIFAR-style form
  int num_classes = 10;
};

// A zoo model ("seed-cnn", "resnet18" ... "resnet152", "vgg16") as a description a program may
// split, tie or extend. InputError listing the names for any other.
ModelDescription describe_zoo_model(const std::string& name, const ZooOptions& options = {});

}  // namespace pw::partition
