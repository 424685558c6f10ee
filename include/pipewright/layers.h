#pragma once
// Factories for the layers a program puts in a ModelDescription (pipewright/model.h). Each returns
// a LayerSpec: a name and a factory the library runs on the rank that holds the layer's stage.
// Parameters start as PyTorch's layers of the same kind do unless `init` says otherwise, drawn from
// the job's seed and the parameter's full name, so a model starts from the same weights whatever
// its split.
#include <cstdint>
#include <string>

#include "pipewright/model.h"

namespace pw::layers {

using models::BagMode;
using models::Bias;
using models::LayerSpec;
using models::TablePlacement;
using models::WeightInit;

// [N, C, H, W] -> [N, out_channels, H', W'], a square kernel.
LayerSpec conv2d(std::string name, int in_channels, int out_channels, int kernel, int stride = 1, int padding = 0,
                 Bias bias = Bias::Yes, WeightInit init = WeightInit::TorchDefault);
// Batch statistics in training (over every replica's samples with --sync-batch-norm), running ones in evaluation.
LayerSpec batch_norm2d(std::string name, int channels, double momentum = 0.1, double eps = 1e-5);
LayerSpec relu(std::string name);
LayerSpec max_pool2d(std::string name, int kernel, int stride, int padding = 0);
LayerSpec avg_pool2d(std::string name, int kernel, int stride, int padding = 0);
LayerSpec adaptive_avg_pool2d(std::string name, int out_h, int out_w);
LayerSpec flatten(std::string name);   // [N, ...] -> [N, rest]
// [N, in_features] -> [N, out_features].
LayerSpec linear(std::string name, int in_features, int out_features, Bias bias = Bias::Yes,
                 WeightInit init = WeightInit::TorchDefault);
// Zeroes each element with probability p in training (masks drawn from `seed`, the step and the micro-batch).
LayerSpec dropout(std::string name, double p, std::uint64_t seed = 0);
// I64 ids [N] -> [N, dim].
LayerSpec embedding(std::string name, std::int64_t rows, int dim);
// Ids [N, bag_size] (I64, or F32 whole numbers such as a model's input) -> [N, dim]: each sample's
// rows pooled (DLRM's EmbeddingBag; rows start uniform in ±sqrt(1/rows)). With
// TablePlacement::ParameterServers the table lives on the job's parameter servers as
// `name`, its rows pulled for each batch's distinct ids and updated there by the sparse optimizer
// (JobConfig::ps); the job then needs servers, and a job with servers needs such a table. A local
// table refuses ids outside [0, rows); a server-backed one takes any id (rows sets the starting
// values' scale). F32 ids must be whole numbers up to 2^24.
struct EmbeddingBagOptions {
  int bag_size = 1;
  BagMode mode = BagMode::Sum;
  TablePlacement placement = TablePlacement::Local;
};
LayerSpec embedding_bag(std::string name, std::int64_t rows, int dim, EmbeddingBagOptions options = {});
// ResNet's blocks (torchvision's BasicBlock and Bottleneck), with a 1x1 projection shortcut when
// the stride or the channel count changes. basic_block outputs `channels`, bottleneck 4 x `width`.
LayerSpec basic_block(std::string name, int in_channels, int channels, int stride = 1);
LayerSpec bottleneck_block(std::string name, int in_channels, int width, int stride = 1);

}  // namespace pw::layers
