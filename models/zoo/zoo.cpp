#include "models/zoo/model_spec.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "models/layers/batch_norm.h"
#include "models/layers/conv2d.h"
#include "models/layers/linear.h"
#include "models/layers/simple.h"

namespace pw::models {

std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  return a > kMax - b ? kMax : a + b;
}

std::int64_t saturating_mul(std::int64_t a, std::int64_t b) {
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  if (a == 0 || b == 0) return 0;
  return a > kMax / b ? kMax : a * b;
}

std::int64_t conv2d_parameters(std::int64_t in, std::int64_t out, std::int64_t kernel, Bias bias) {
  return saturating_add(saturating_mul(saturating_mul(out, in), saturating_mul(kernel, kernel)), bias == Bias::Yes ? out : 0);
}

std::int64_t linear_parameters(std::int64_t in, std::int64_t out, Bias bias) {
  return saturating_add(saturating_mul(in, out), bias == Bias::Yes ? out : 0);
}

std::int64_t batch_norm_parameters(std::int64_t channels) { return saturating_mul(2, channels); }

std::int64_t resnet_block_parameters(BlockKind kind, std::int64_t in, std::int64_t width, int stride) {
  std::int64_t n = 0;
  std::int64_t out = 0;
  if (kind == BlockKind::Basic) {
    out = width;
    n = saturating_add(conv2d_parameters(in, width, 3, Bias::No), batch_norm_parameters(width));
    n = saturating_add(n, saturating_add(conv2d_parameters(width, width, 3, Bias::No), batch_norm_parameters(width)));
  } else {
    out = saturating_mul(width, 4);
    n = saturating_add(conv2d_parameters(in, width, 1, Bias::No), batch_norm_parameters(width));
    n = saturating_add(n, saturating_add(conv2d_parameters(width, width, 3, Bias::No), batch_norm_parameters(width)));
    n = saturating_add(n, saturating_add(conv2d_parameters(width, out, 1, Bias::No), batch_norm_parameters(out)));
  }
  if (stride != 1 || in != out)
    n = saturating_add(n, saturating_add(conv2d_parameters(in, out, 1, Bias::No), batch_norm_parameters(out)));
  return n;
}

namespace {

// A factory of layer L and the parameters it will have (0 for those without any).
template <typename L, typename... Args>
LayerSpec spec(std::string name, std::int64_t parameters, Args... args) {
  LayerSpec s{std::move(name), [=] { return std::unique_ptr<Layer>(std::make_unique<L>(args...)); }};
  s.parameters = parameters;
  return s;
}

LayerSpec conv(std::string name, int in, int out, int kernel, int stride, int padding, Bias bias,
               WeightInit init = WeightInit::TorchDefault) {
  return spec<Conv2d>(std::move(name), conv2d_parameters(in, out, kernel, bias), in, out, kernel, stride, padding, bias,
                      init);
}

LayerSpec linear(std::string name, int in, int out, Bias bias, WeightInit init = WeightInit::TorchDefault) {
  return spec<Linear>(std::move(name), linear_parameters(in, out, bias), in, out, bias, init);
}

LayerSpec batch_norm(std::string name, int channels) {
  return spec<BatchNorm2d>(std::move(name), batch_norm_parameters(channels), channels);
}

// The widths a model may have: far beyond any that fits (resnet18 at this width has 10^13
// parameters), and small enough that no channel count overflows.
constexpr int kMaxWidth = 1 << 20;

enum class Form { Small, ImageNet };
Form form_of(const Shape& sample) { return sample[1] <= 64 && sample[2] <= 64 ? Form::Small : Form::ImageNet; }

ModelSpec seed_cnn(const ModelOptions& o) {
  const auto c = static_cast<int>(o.sample_shape[0]);
  const auto h = (o.sample_shape[1] - 2) / 2, w = (o.sample_shape[2] - 2) / 2;
  PW_INPUT_CHECK(h > 0 && w > 0, "seed-cnn needs inputs of at least 4x4, got " << shape_str(o.sample_shape));
  ModelSpec m{"seed-cnn", o.sample_shape, o.num_classes, {}};
  // Keras' layers start from Glorot-uniform weights and zero biases; so does the seed CNN.
  const auto glorot = WeightInit::GlorotUniform;
  PW_INPUT_CHECK(32 * h * w <= std::numeric_limits<int>::max(),
                 "seed-cnn: inputs of " << shape_str(o.sample_shape) << " make its fc1 " << 32 * h * w
                                        << " inputs wide; at most " << std::numeric_limits<int>::max());
  m.layers = {conv("conv1", c, 32, 3, 1, 0, Bias::Yes, glorot),
              spec<ReLU>("relu1", 0),
              spec<MaxPool2d>("pool1", 0, 2, 2, 0),
              spec<Flatten>("flatten", 0),
              linear("fc1", static_cast<int>(32 * h * w), 64, Bias::Yes, glorot),
              spec<ReLU>("relu2", 0),
              linear("fc2", 64, o.num_classes, Bias::Yes, glorot)};
  return m;
}

}  // namespace

std::unique_ptr<Layer> resnet_block(BlockKind kind, int in, int width, int stride) {
  std::vector<std::pair<std::string, std::unique_ptr<Layer>>> main;
  int out = 0;
  if (kind == BlockKind::Basic) {
    out = width;
    main.emplace_back("conv1", std::make_unique<Conv2d>(in, width, 3, stride, 1, Bias::No));
    main.emplace_back("bn1", std::make_unique<BatchNorm2d>(width));
    main.emplace_back("relu1", std::make_unique<ReLU>());
    main.emplace_back("conv2", std::make_unique<Conv2d>(width, width, 3, 1, 1, Bias::No));
    main.emplace_back("bn2", std::make_unique<BatchNorm2d>(width));
  } else {
    out = width * 4;
    main.emplace_back("conv1", std::make_unique<Conv2d>(in, width, 1, 1, 0, Bias::No));
    main.emplace_back("bn1", std::make_unique<BatchNorm2d>(width));
    main.emplace_back("relu1", std::make_unique<ReLU>());
    main.emplace_back("conv2", std::make_unique<Conv2d>(width, width, 3, stride, 1, Bias::No));
    main.emplace_back("bn2", std::make_unique<BatchNorm2d>(width));
    main.emplace_back("relu2", std::make_unique<ReLU>());
    main.emplace_back("conv3", std::make_unique<Conv2d>(width, out, 1, 1, 0, Bias::No));
    main.emplace_back("bn3", std::make_unique<BatchNorm2d>(out));
  }
  std::unique_ptr<Layer> shortcut;
  if (stride != 1 || in != out) {
    auto seq = std::make_unique<Sequential>();
    seq->add("0", std::make_unique<Conv2d>(in, out, 1, stride, 0, Bias::No));
    seq->add("1", std::make_unique<BatchNorm2d>(out));
    shortcut = std::move(seq);
  }
  return std::make_unique<Residual>(std::move(main), std::move(shortcut));
}

namespace {

ModelSpec resnet(const std::string& name, const ModelOptions& o, BlockKind kind, std::vector<int> blocks) {
  PW_INPUT_CHECK(o.width >= 1 && o.width <= kMaxWidth,
                 name << ": width " << o.width << "; expected 1 to " << kMaxWidth);
  const int c = static_cast<int>(o.sample_shape[0]);
  const int w = o.width;
  ModelSpec m{name, o.sample_shape, o.num_classes, {}};
  if (form_of(o.sample_shape) == Form::Small) {
    m.layers.push_back(conv("conv1", c, w, 3, 1, 1, Bias::No));
  } else {
    m.layers.push_back(conv("conv1", c, w, 7, 2, 3, Bias::No));
  }
  m.layers.push_back(batch_norm("bn1", w));
  m.layers.push_back(spec<ReLU>("relu", 0));
  if (form_of(o.sample_shape) == Form::ImageNet) m.layers.push_back(spec<MaxPool2d>("maxpool", 0, 3, 2, 1));
  const int expansion = kind == BlockKind::Basic ? 1 : 4;
  int in = w;
  for (int stage = 0; stage < 4; ++stage) {
    const int width = w << stage;
    for (int b = 0; b < blocks[static_cast<std::size_t>(stage)]; ++b) {
      const int stride = (b == 0 && stage > 0) ? 2 : 1;
      const int block_in = in;
      LayerSpec block{"layer" + std::to_string(stage + 1) + "." + std::to_string(b),
                      [=] { return resnet_block(kind, block_in, width, stride); }};
      block.parameters = resnet_block_parameters(kind, block_in, width, stride);
      m.layers.push_back(std::move(block));
      in = width * expansion;
    }
  }
  m.layers.push_back(spec<AdaptiveAvgPool2d>("avgpool", 0, 1, 1));
  m.layers.push_back(spec<Flatten>("flatten", 0));
  m.layers.push_back(linear("fc", in, o.num_classes, Bias::Yes));
  return m;
}

ModelSpec vgg16(const ModelOptions& o) {
  PW_INPUT_CHECK(o.width >= 1 && o.width <= kMaxWidth, "vgg16: width " << o.width << "; expected 1 to " << kMaxWidth);
  const std::vector<int> config = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
  const Form form = form_of(o.sample_shape);
  // Each max-pool halves (rounding down): the small form has four, the ImageNet form five.
  const std::int64_t smallest = form == Form::ImageNet ? 32 : 16;
  PW_INPUT_CHECK(o.sample_shape.size() == 3 && o.sample_shape[1] >= smallest && o.sample_shape[2] >= smallest,
                 "vgg16 needs inputs of at least " << smallest << "x" << smallest << " (its "
                                                   << (form == Form::ImageNet ? 5 : 4) << " max-pools halve them), got "
                                                   << shape_str(o.sample_shape));
  ModelSpec m{"vgg16", o.sample_shape, o.num_classes, {}};
  int in = static_cast<int>(o.sample_shape[0]);
  int index = 0;
  int pools = 0;
  for (std::size_t i = 0; i < config.size(); ++i) {
    const std::string name = "features." + std::to_string(index);
    if (config[i] == 0) {
      ++pools;
      // 28x28 inputs have room for four halvings; the small form drops the fifth pool.
      if (form == Form::ImageNet || pools < 5) {
        m.layers.push_back(spec<MaxPool2d>(name, 0, 2, 2, 0));
        ++index;
      }
      continue;
    }
    const int out = std::max(1, config[i] * o.width / 64);
    m.layers.push_back(conv(name, in, out, 3, 1, 1, Bias::Yes));
    m.layers.push_back(spec<ReLU>("features." + std::to_string(index + 1), 0));
    index += 2;
    in = out;
  }
  const int pooled = form == Form::ImageNet ? 7 : 1;
  const int hidden = form == Form::ImageNet ? 4096 : 512;
  m.layers.push_back(spec<AdaptiveAvgPool2d>("avgpool", 0, pooled, pooled));
  m.layers.push_back(spec<Flatten>("flatten", 0));
  m.layers.push_back(linear("classifier.0", in * pooled * pooled, hidden, Bias::Yes));
  m.layers.push_back(spec<ReLU>("classifier.1", 0));
  m.layers.push_back(spec<Dropout>("classifier.2", 0, o.dropout, o.seed * 2 + 1));
  m.layers.push_back(linear("classifier.3", hidden, hidden, Bias::Yes));
  m.layers.push_back(spec<ReLU>("classifier.4", 0));
  m.layers.push_back(spec<Dropout>("classifier.5", 0, o.dropout, o.seed * 2 + 2));
  m.layers.push_back(linear("classifier.6", hidden, o.num_classes, Bias::Yes));
  return m;
}

}  // namespace

std::vector<std::string> model_names() {
  return {"seed-cnn", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vgg16", "dlrm"};
}

ModelSpec make_model_spec(const std::string& name, const ModelOptions& o) {
  if (name == "dlrm") return make_dlrm_spec(o);
  PW_INPUT_CHECK(o.sample_shape.size() == 3 && o.sample_shape[0] > 0 && o.sample_shape[1] > 0 && o.sample_shape[2] > 0,
                 "bad input sample shape " << shape_str(o.sample_shape) << "; expected {C, H, W}");
  PW_INPUT_CHECK(o.num_classes >= 2, "need at least 2 classes, got " << o.num_classes);
  if (name == "seed-cnn") return seed_cnn(o);
  if (name == "resnet18") return resnet(name, o, BlockKind::Basic, {2, 2, 2, 2});
  if (name == "resnet34") return resnet(name, o, BlockKind::Basic, {3, 4, 6, 3});
  if (name == "resnet50") return resnet(name, o, BlockKind::Bottleneck, {3, 4, 6, 3});
  if (name == "resnet101") return resnet(name, o, BlockKind::Bottleneck, {3, 4, 23, 3});
  if (name == "resnet152") return resnet(name, o, BlockKind::Bottleneck, {3, 8, 36, 3});
  if (name == "vgg16") return vgg16(o);
  std::ostringstream names;
  for (const auto& n : model_names()) names << (names.tellp() > 0 ? ", " : "") << n;
  throw InputError("unknown model '" + name + "'; accepted: " + names.str());
}

std::unique_ptr<Sequential> build_model(const ModelSpec& spec, std::uint64_t seed) {
  auto model = std::make_unique<Sequential>();
  for (const auto& layer : spec.layers) model->add(layer.name, layer.build());
  model->initialize(seed);
  return model;
}

std::int64_t parameter_count_of(const std::vector<LayerSpec>& layers) {
  std::int64_t total = 0;
  for (const auto& layer : layers) total = saturating_add(total, std::max<std::int64_t>(layer.parameters, 0));
  return total;
}

ModelStats model_stats(const ModelSpec& spec) {
  // One layer at a time (as a Sequential of them counts), so that no more than the largest layer is
  // ever built here.
  Shape shape = spec.sample_shape;
  shape.insert(shape.begin(), 1);
  ModelStats stats;
  for (const auto& spec_of_layer : spec.layers) {
    const auto layer = spec_of_layer.build();
    stats.parameters += layer->parameter_count();
    stats.activation_bytes_per_sample += layer->activation_elements(shape) * 4;
    shape = layer->output_shape(shape);
  }
  return stats;
}

}  // namespace pw::models
