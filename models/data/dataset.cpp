#include "models/data/dataset.h"
#include "models/data/dataset_names.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include "core/error.h"
#include "models/data/shards/shard_source.h"
#include "models/data/image_dataset.h"
#include "models/data/synthetic_clicks.h"

namespace pw::models::data {

Dataset::~Dataset() = default;

void Dataset::fill_image(std::int64_t index, float* image_out) const {
  std::int64_t label = 0;
  fill(index, image_out, label);
}

std::int64_t Dataset::fill_label(std::int64_t index) const {
  std::vector<float> image(static_cast<std::size_t>(kernels::shape_numel(sample_shape())));
  std::int64_t label = 0;
  fill(index, image.data(), label);
  return label;
}

void Dataset::fill_in_epoch(std::int64_t, std::int64_t index, float* image_out, std::int64_t& label_out) const {
  fill(index, image_out, label_out);
}

void Dataset::fill_image_in_epoch(std::int64_t, std::int64_t index, float* image_out) const {
  fill_image(index, image_out);
}

std::int64_t Dataset::fill_label_in_epoch(std::int64_t, std::int64_t index) const { return fill_label(index); }

namespace {

std::string fashion_mnist_dir(const DatasetOptions& options) {
  return options.fashion_mnist_dir.empty() ? kFashionMnistDefaultDir : options.fashion_mnist_dir;
}

std::string required_data_dir(const std::string& name, const DatasetOptions& options) {
  PW_INPUT_CHECK(!options.data_dir.empty(), "data set '" << name << "' needs its folder: --data-dir DIR");
  return options.data_dir;
}

std::int64_t default_synthetic_size(Split split) { return split == Split::Train ? 60000 : 10000; }

}  // namespace

std::unique_ptr<Dataset> open_dataset(const std::string& name, Split split, const DatasetOptions& options) {
  if (name == "fashion-mnist") return open_fashion_mnist(fashion_mnist_dir(options), split, options.parts);
  if (name == "synthetic") {
    const std::int64_t size = options.synthetic_size > 0 ? options.synthetic_size : default_synthetic_size(split);
    return make_synthetic_images(size, options.synthetic_shape, options.synthetic_classes, options.seed, split);
  }
  if (name == "synthetic-clicks") {
    // synthetic_size counts training samples; the test split keeps Fashion-MNIST's 6:1 proportion.
    const std::int64_t train = options.synthetic_size > 0 ? options.synthetic_size : default_synthetic_size(Split::Train);
    const std::int64_t size = split == Split::Train ? train : std::max<std::int64_t>(1, train / 6);
    return make_synthetic_clicks(options.clicks, size, options.seed, split);
  }
  if (name == "image-folder" || name == "shards") {
    ImageOptions image;
    image.size = options.image_size;
    image.augment = options.augment;
    image.seed = options.seed;
    image.bad_samples = options.bad_samples;
    image.bad_sample_log = options.bad_sample_log;
    image.normalization = options.normalization.value_or(kImageNetNormalization);
    const auto dir = required_data_dir(name, options);
    // Even a rank that reads nothing opens the listing or the index: the class count is in it.
    if (name == "shards") return make_image_dataset(shards::open_shard_source(dir, split), image, split);
    return make_image_dataset(open_image_folder(dir, split), image, split);
  }
  if (name == "cifar10")
    return open_cifar10(required_data_dir(name, options), split, options.parts,
                        options.normalization.value_or(kCifar10Normalization));
  std::string accepted;
  for (const auto& known : dataset_names()) accepted += (accepted.empty() ? "" : ", ") + known;
  throw InputError("unknown data set '" + name + "'; accepted: " + accepted);
}

std::vector<std::string> dataset_names() {
  return {"fashion-mnist", "synthetic", "synthetic-clicks", "image-folder", "shards", "cifar10"};
}

kernels::Shape parse_sample_shape(const std::string& text) {
  kernels::Shape shape;
  std::size_t pos = 0;
  bool well_formed = true;
  while (well_formed) {
    const std::size_t end = std::min(text.find('x', pos), text.size());
    std::int64_t value = 0;
    const char* first = text.data() + pos;
    const char* last = text.data() + end;
    const auto [ptr, ec] = std::from_chars(first, last, value);
    well_formed = first != last && ec == std::errc() && ptr == last && value > 0;
    shape.push_back(value);
    if (end == text.size()) break;
    pos = end + 1;
  }
  PW_INPUT_CHECK(well_formed && shape.size() == 3,
                 "'" << text << "' is not a sample shape; expected CxHxW with positive integers, e.g. 1x28x28 or 3x224x224");
  return shape;
}

}  // namespace pw::models::data
