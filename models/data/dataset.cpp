#include "models/data/dataset.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include "core/error.h"
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

namespace {

std::string fashion_mnist_dir(const DatasetOptions& options) {
  return options.fashion_mnist_dir.empty() ? kFashionMnistDefaultDir : options.fashion_mnist_dir;
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
  throw InputError("unknown data set '" + name + "'; accepted: fashion-mnist, synthetic, synthetic-clicks");
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
