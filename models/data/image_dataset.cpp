// Encoded images through the ImageNet recipe's transforms (image_transform.h).
#include "models/data/image_dataset.h"

#include "core/error.h"
#include "models/data/bad_sample_log.h"
#include "models/data/image_transform.h"

namespace pw::models::data {
namespace {

class ImageDataset final : public Dataset {
 public:
  ImageDataset(std::unique_ptr<EncodedSource> source, ImageOptions options, Split split, int num_classes)
      : source_(std::move(source)),
        options_(std::move(options)),
        split_(split),
        augment_(split == Split::Train && options_.augment == Augment::ImageNet),
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
  std::int64_t fill_label(std::int64_t index) const override { return fill_label_in_epoch(0, index); }

  void fill_in_epoch(std::int64_t epoch, std::int64_t index, float* image_out, std::int64_t& label_out) const override {
    const Decoded d = decode(epoch, index, Record::Yes);
    resample_planned(d.image, options_.normalization, image_out);
    label_out = d.label;
  }
  void fill_image_in_epoch(std::int64_t epoch, std::int64_t index, float* image_out) const override {
    resample_planned(decode(epoch, index, Record::Yes).image, options_.normalization, image_out);
  }
  std::int64_t fill_label_in_epoch(std::int64_t epoch, std::int64_t index) const override {
    if (options_.bad_samples == BadSamples::Fail) return checked(index).label(index);
    return decode(epoch, index, Record::No).label;
  }

 private:
  struct Decoded {
    PlannedImage image;
    std::int64_t label = 0;
  };
  enum class Record { Yes, No };

  const EncodedSource& checked(std::int64_t index) const {
    PW_CHECK(source_ != nullptr, name_ << ": this rank opened no images");
    PW_CHECK(index >= 0 && index < source_->size(), "image " << index << " outside the " << source_->size() << " of " << name_);
    return *source_;
  }

  // Where sample `index` of `epoch` comes from and its pixels as decoded for its transform. Which
  // sample replaces a bad one must be the same on every rank that fills a part of it, and a
  // pipeline's last stage fills only the label: it cannot learn from the first stage which images
  // failed (nothing but activations flows that way), so it makes the same decisions itself. Each
  // depends only on (seed, epoch, index) and a file's bytes: the candidate is decoded at the scale
  // sample index's own plan asks, which is exactly what the first stage does, so both reach the same
  // verdict (a JPEG's truncation could show at one DCT scale and not another, so a cheaper check
  // could disagree). The cost, with Skip only: the last stage decodes the images whose labels it reads.
  Decoded decode(std::int64_t epoch, std::int64_t index, Record record) const {
    const EncodedSource& source = checked(index);
    const std::int64_t n = source.size();
    std::string first_failure;
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t at = (index + k) % n;
      const EncodedSample sample = source.read(at);   // a file that cannot be read is an error, not a bad sample
      try {
        return {decode_for_plan(sample, plan_for(sample, epoch, index)), sample.label};
      } catch (const InputError& e) {
        if (options_.bad_samples == BadSamples::Fail) throw;
        if (record == Record::Yes && options_.bad_sample_log) options_.bad_sample_log->record(split_, at, sample.name);
        if (first_failure.empty()) first_failure = e.what();
      }
    }
    throw InputError(name_ + ": none of its " + std::to_string(n) + " images decodes (" + first_failure + ")");
  }

  ResizePlan plan_for(const EncodedSample& sample, std::int64_t epoch, std::int64_t index) const {
    const ImageSize stored = encoded_image_size(sample);
    if (!augment_) return evaluation_plan(stored, options_.size);
    Rng rng = sample_rng(options_.seed, epoch, index);
    return random_resized_crop_plan(stored, options_.size, rng);
  }

  std::unique_ptr<EncodedSource> source_;
  ImageOptions options_;
  Split split_;
  bool augment_;
  int num_classes_;
  std::string name_;
};

}  // namespace


std::unique_ptr<Dataset> make_image_dataset(std::unique_ptr<EncodedSource> source, ImageOptions options, Split split,
                                            int num_classes) {
  return std::make_unique<ImageDataset>(std::move(source), std::move(options), split, num_classes);
}

}  // namespace pw::models::data
