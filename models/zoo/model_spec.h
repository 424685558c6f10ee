#pragma once
// The model zoo as flat lists of named layer factories (LayerSpec): a whole model is built by
// running every factory; a pipeline stage runs only its own range.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/data/click_features.h"
#include "models/layer.h"
#include "models/layers/embedding_bag.h"
#include "models/layers/sequential.h"
#include "models/loss.h"
#include "models/remote_table.h"

namespace pw::models {

// LayerSpec: pipewright/model.h.

// EmbeddingTableSpec: models/remote_table.h.

struct ModelOptions {
  int width = 64;                 // ResNet base width (w, 2w, 4w, 8w); VGG widths scale by width/64
  Shape sample_shape{1, 28, 28};  // {C, H, W} of one input sample
  int num_classes = 10;
  double dropout = 0.5;           // VGG classifier
  std::uint64_t seed = 0;         // dropout masks

  // dlrm (its input is the packed click row of data/click_features.h; sample_shape is ignored):
  data::ClickFeatures clicks;           // dense features, one table size per sparse feature, bag size
  int embedding_dim = 8;
  std::vector<int> bottom_mlp = {16};   // hidden widths; a final Linear to embedding_dim follows
  std::vector<int> top_mlp = {16};      // hidden widths; a final Linear to one logit follows
  // Where its tables live: local EmbeddingBags, or server-backed (made by the job's
  // RemoteTableScope when the model is built).
  TablePlacement embedding_tables = TablePlacement::Local;
};

struct ModelSpec {
  std::string name;
  Shape sample_shape;
  int num_classes = 0;
  std::vector<LayerSpec> layers;
  Objective objective = Objective::SoftmaxCrossEntropy;   // dlrm: BinaryCrossEntropy on one logit
  // Its embedding tables (none for most models); on servers when ModelOptions said so.
  std::vector<EmbeddingTableSpec> embedding_tables;
};

// "seed-cnn", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vgg16", "dlrm".
// Inputs of at most 64x64 get the small (CIFAR-style) form, larger ones the ImageNet form.
ModelSpec make_model_spec(const std::string& name, const ModelOptions& options);
std::vector<std::string> model_names();

// DLRM (zoo/dlrm.cpp): "features" (bottom MLP + embedding bags), "interaction", then the top MLP
// as "top.0", "top.1", ... ending in one logit.
ModelSpec make_dlrm_spec(const ModelOptions& options);

// ResNet's residual blocks: Basic (two 3x3 convolutions, `width` channels out) and Bottleneck
// (1x1, 3x3, 1x1; 4 x `width` out), each with batch norms and a projection shortcut when needed.
enum class BlockKind { Basic, Bottleneck };
std::unique_ptr<Layer> resnet_block(BlockKind kind, int in, int width, int stride);

// Builds every layer into one Sequential (names from the specs), initialised from `seed`.
std::unique_ptr<Sequential> build_model(const ModelSpec& spec, std::uint64_t seed);

// Parameters of the zoo's layers counted without building them (LayerSpec::parameters), in int64
// arithmetic that saturates at INT64_MAX rather than overflow (a model that large is refused).
std::int64_t saturating_add(std::int64_t a, std::int64_t b);
std::int64_t saturating_mul(std::int64_t a, std::int64_t b);
std::int64_t conv2d_parameters(std::int64_t in, std::int64_t out, std::int64_t kernel, Bias bias);
std::int64_t linear_parameters(std::int64_t in, std::int64_t out, Bias bias);
std::int64_t batch_norm_parameters(std::int64_t channels);
std::int64_t resnet_block_parameters(BlockKind kind, std::int64_t in, std::int64_t width, int stride);
// The sum of the layers' counts, an unknown one (-1) taken as 0.
std::int64_t parameter_count_of(const std::vector<LayerSpec>& layers);

// DLRM's interaction of `vectors` vectors of width `dim`: dim + vectors(vectors-1)/2 values, in
// int64 (16,000 tables make it 128 M wide; past about 46,000 it would not fit an int).
std::int64_t dlrm_interaction_width(std::int64_t vectors, std::int64_t dim);
// The most sparse features (tables) dlrm takes: its interaction's layers count in int.
inline constexpr std::int64_t kMaxDlrmTables = 46340;

struct ModelStats {
  std::int64_t parameters = 0;
  std::int64_t activation_bytes_per_sample = 0;   // F32 outputs of every layer for one sample
};
// Builds one layer at a time (never more than the largest layer at once).
ModelStats model_stats(const ModelSpec& spec);

}  // namespace pw::models
