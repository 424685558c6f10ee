// The public layer factories (pipewright/layers.h) over the library's layer classes.
#include "pipewright/layers.h"

#include <memory>
#include <utility>

#include "core/error.h"
#include "models/layers/batch_norm.h"
#include "models/layers/conv2d.h"
#include "models/layers/embedding.h"
#include "models/layers/embedding_bag.h"
#include "models/layers/linear.h"
#include "models/layers/simple.h"
#include "models/remote_table.h"
#include "models/zoo/model_spec.h"

namespace pw::layers {
namespace {

template <typename L, typename... Args>
LayerSpec make(std::string name, Args... args) {
  PW_INPUT_CHECK(!name.empty(), "a layer needs a name (it prefixes its parameters' names)");
  return {std::move(name), [=] { return std::unique_ptr<models::Layer>(std::make_unique<L>(args...)); }};
}

void check_positive(const std::string& layer, const char* what, std::int64_t value) {
  PW_INPUT_CHECK(value > 0, "layer '" << layer << "': " << what << " " << value << "; must be > 0");
}

}  // namespace

LayerSpec conv2d(std::string name, int in_channels, int out_channels, int kernel, int stride, int padding, Bias bias,
                 WeightInit init) {
  check_positive(name, "in_channels", in_channels);
  check_positive(name, "out_channels", out_channels);
  check_positive(name, "kernel", kernel);
  check_positive(name, "stride", stride);
  PW_INPUT_CHECK(padding >= 0, "layer '" << name << "': padding " << padding << "; must be >= 0");
  return make<models::Conv2d>(std::move(name), in_channels, out_channels, kernel, stride, padding, bias, init);
}

LayerSpec batch_norm2d(std::string name, int channels, double momentum, double eps) {
  check_positive(name, "channels", channels);
  PW_INPUT_CHECK(momentum >= 0 && momentum <= 1, "layer '" << name << "': momentum " << momentum << "; must be in [0, 1]");
  PW_INPUT_CHECK(eps > 0, "layer '" << name << "': eps " << eps << "; must be > 0");
  return make<models::BatchNorm2d>(std::move(name), channels, momentum, eps);
}

LayerSpec relu(std::string name) { return make<models::ReLU>(std::move(name)); }

LayerSpec max_pool2d(std::string name, int kernel, int stride, int padding) {
  check_positive(name, "kernel", kernel);
  check_positive(name, "stride", stride);
  return make<models::MaxPool2d>(std::move(name), kernel, stride, padding);
}

LayerSpec avg_pool2d(std::string name, int kernel, int stride, int padding) {
  check_positive(name, "kernel", kernel);
  check_positive(name, "stride", stride);
  return make<models::AvgPool2d>(std::move(name), kernel, stride, padding);
}

LayerSpec adaptive_avg_pool2d(std::string name, int out_h, int out_w) {
  check_positive(name, "out_h", out_h);
  check_positive(name, "out_w", out_w);
  return make<models::AdaptiveAvgPool2d>(std::move(name), out_h, out_w);
}

LayerSpec flatten(std::string name) { return make<models::Flatten>(std::move(name)); }

LayerSpec linear(std::string name, int in_features, int out_features, Bias bias, WeightInit init) {
  check_positive(name, "in_features", in_features);
  check_positive(name, "out_features", out_features);
  return make<models::Linear>(std::move(name), in_features, out_features, bias, init);
}

LayerSpec dropout(std::string name, double p, std::uint64_t seed) {
  PW_INPUT_CHECK(p >= 0 && p < 1, "layer '" << name << "': dropout probability " << p << "; must be in [0, 1)");
  return make<models::Dropout>(std::move(name), p, seed);
}

LayerSpec embedding(std::string name, std::int64_t rows, int dim) {
  check_positive(name, "rows", rows);
  check_positive(name, "dim", dim);
  return make<models::Embedding>(std::move(name), rows, dim);
}

LayerSpec embedding_bag(std::string name, std::int64_t rows, int dim, EmbeddingBagOptions options) {
  PW_INPUT_CHECK(!name.empty(), "a layer needs a name (it prefixes its parameters' names)");
  check_positive(name, "rows", rows);
  check_positive(name, "dim", dim);
  check_positive(name, "bag_size", options.bag_size);
  models::EmbeddingTableSpec table;
  table.name = name;
  table.rows = rows;
  table.dim = dim;
  table.bag_size = options.bag_size;
  table.mode = options.mode;
  if (options.placement == TablePlacement::Local)
    return make<models::EmbeddingBag>(std::move(name), rows, dim, options.bag_size, options.mode);
  LayerSpec spec{name, [table] { return models::make_server_backed_bag(table); }};
  spec.server_tables.push_back(std::move(name));
  return spec;
}

LayerSpec basic_block(std::string name, int in_channels, int channels, int stride) {
  check_positive(name, "in_channels", in_channels);
  check_positive(name, "channels", channels);
  check_positive(name, "stride", stride);
  return {std::move(name), [=] { return models::resnet_block(models::BlockKind::Basic, in_channels, channels, stride); }};
}

LayerSpec bottleneck_block(std::string name, int in_channels, int width, int stride) {
  check_positive(name, "in_channels", in_channels);
  check_positive(name, "width", width);
  check_positive(name, "stride", stride);
  return {std::move(name), [=] { return models::resnet_block(models::BlockKind::Bottleneck, in_channels, width, stride); }};
}

}  // namespace pw::layers
