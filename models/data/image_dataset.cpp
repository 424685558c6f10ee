// Encoded images through the ImageNet recipe's transforms (image_transform.h).
#include "models/data/image_dataset.h"

#include "core/error.h"
#include "models/data/image_transform.h"

namespace pw::models::data {
namespace {

class ImageDataset final : public Dataset {
 public:
  ImageDataset(std::unique_ptr<EncodedSource> source, ImageOptions options, Split split, int num_classes)
      : source_(std::move(source)),
        options_(options),
        augment_(split == Split::Train && options.augment == Augment::ImageNet),
        num_classes_(source_ ? static_cast<int>(source_->classes().size()) : num_classes),
        name_(source_ ? source_->name() : "images") {
    PW_INPUT_CHECK(options_.size >= 1, "image size " << options_.size << "; expected 1 or more pixels");
  }

  std::int64_t size() const override { return source_ ? source_->size() : 0; }
  kernels::Shape sample_shape() const override { return {3, options_.size, options_.size}; }
  int num_classes() const override { return num_classes_; }
  std::string name() const override { return name_; }

  void fill(std::int64_t index, float* image_out, std::int64_t& label_out) const override {
    fill_in_epoch(0, index, image_out, label_out);
  }
  void fill_image(std::int64_t index, float* image_out) const override { fill_image_in_epoch(0, index, image_out); }
  std::int64_t fill_label(std::int64_t index) const override { return checked(index).label(index); }

  void fill_in_epoch(std::int64_t epoch, std::int64_t index, float* image_out, std::int64_t& label_out) const override {
    const EncodedSample sample = checked(index).read(index);
    transform(sample, epoch, index, image_out);
    label_out = sample.label;
  }
  void fill_image_in_epoch(std::int64_t epoch, std::int64_t index, float* image_out) const override {
    transform(checked(index).read(index), epoch, index, image_out);
  }

 private:
  const EncodedSource& checked(std::int64_t index) const {
    PW_CHECK(source_ != nullptr, name_ << ": this rank opened no images");
    PW_CHECK(index >= 0 && index < source_->size(), "image " << index << " outside the " << source_->size() << " of " << name_);
    return *source_;
  }

  void transform(const EncodedSample& sample, std::int64_t epoch, std::int64_t index, float* out) const {
    const ImageSize stored = encoded_image_size(sample);
    ResizePlan plan;
    if (augment_) {
      Rng rng = sample_rng(options_.seed, epoch, index);
      plan = random_resized_crop_plan(stored, options_.size, rng);
    } else {
      plan = evaluation_plan(stored, options_.size);
    }
    apply_plan(sample, plan, options_.normalization, out);
  }

  std::unique_ptr<EncodedSource> source_;
  ImageOptions options_;
  bool augment_;
  int num_classes_;
  std::string name_;
};

}  // namespace


std::unique_ptr<Dataset> make_image_dataset(std::unique_ptr<EncodedSource> source, ImageOptions options, Split split,
                                            int num_classes) {
  return std::make_unique<ImageDataset>(std::move(source), options, split, num_classes);
}

}  // namespace pw::models::data
