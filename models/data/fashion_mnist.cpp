// Fashion-MNIST (Xiao et al. 2017): 28x28 grey images of 10 kinds of clothing, 60000 train, 10000 test.
#include <array>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "models/data/dataset.h"
#include "models/data/idx_reader.h"

namespace pw::models::data {
namespace {

constexpr int kClasses = 10;

// "<dir>/<stem>.gz" when present, else "<dir>/<stem>"; when neither exists the .gz path is
// returned, so the reader's "cannot open" message names the usual file.
std::string locate(const std::string& dir, const std::string& stem) {
  const std::filesystem::path base = std::filesystem::path(dir) / stem;
  const std::string gz = base.string() + ".gz";
  std::error_code ec;   // the error_code forms: a link loop is "not there", not an exception
  if (std::filesystem::exists(gz, ec) || !std::filesystem::exists(base, ec)) return gz;
  return base.string();
}

class FashionMnist final : public Dataset {
 public:
  FashionMnist(const std::string& images_path, const std::string& labels_path, DataParts parts) {
    const bool images = parts == DataParts::Both || parts == DataParts::Inputs;
    const bool labels = parts == DataParts::Both || parts == DataParts::Labels;
    if (images) {
      images_ = read_idx_images(images_path);
      size_ = images_.count;
    } else {
      images_.rows = images_.cols = 28;
    }
    if (labels) {
      labels_ = read_idx_labels(labels_path).labels;
      size_ = static_cast<std::int64_t>(labels_.size());
    }
    if (images && labels) {
      const auto label_count = static_cast<std::int64_t>(labels_.size());
      PW_INPUT_CHECK(images_.count == label_count, "'" << images_path << "' holds " << images_.count
                                                       << " images but '" << labels_path << "' holds " << label_count
                                                       << " labels; expected the same count");
    }
    for (std::size_t i = 0; i < labels_.size(); ++i) {
      PW_INPUT_CHECK(labels_[i] < kClasses, "'" << labels_path << "' has label " << int{labels_[i]} << " at index "
                                                << i << "; expected labels 0.." << kClasses - 1);
    }
    for (int v = 0; v < 256; ++v) normalised_[v] = (static_cast<float>(v) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
  }

  std::int64_t size() const override { return size_; }
  kernels::Shape sample_shape() const override { return {1, images_.rows, images_.cols}; }
  int num_classes() const override { return kClasses; }
  std::string name() const override { return "fashion-mnist"; }

  void fill(std::int64_t index, float* image_out, std::int64_t& label_out) const override {
    fill_image(index, image_out);
    label_out = fill_label(index);
  }

  void fill_image(std::int64_t index, float* image_out) const override {
    PW_CHECK(index >= 0 && index < images_.count, "image " << index << " outside the " << images_.count
                                                           << " fashion-mnist images read here");
    const std::int64_t pixels = images_.rows * images_.cols;
    const std::uint8_t* src = images_.pixels.data() + index * pixels;
    for (std::int64_t i = 0; i < pixels; ++i) image_out[i] = normalised_[src[i]];
  }

  std::int64_t fill_label(std::int64_t index) const override {
    PW_CHECK(index >= 0 && index < static_cast<std::int64_t>(labels_.size()),
             "label " << index << " outside the " << labels_.size() << " fashion-mnist labels read here");
    return labels_[static_cast<std::size_t>(index)];
  }

 private:
  IdxImages images_;
  std::vector<std::uint8_t> labels_;
  std::int64_t size_ = 0;
  std::array<float, 256> normalised_{};
};

}  // namespace

std::unique_ptr<Dataset> open_fashion_mnist(const std::string& dir, Split split, DataParts parts) {
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  return std::make_unique<FashionMnist>(locate(dir, prefix + "-images-idx3-ubyte"),
                                        locate(dir, prefix + "-labels-idx1-ubyte"), parts);
}

}  // namespace pw::models::data
