#pragma once
// A data set of labelled samples, read by index. The engine's loaders call fill() from several
// threads at once, each rank only for the indices of its own part of every global batch, so a
// data set must give the same sample for the same index whoever asks.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace pw::models::data {

enum class Split { Train, Test };

// Per-channel normalisation of image samples: (pixel / 255 - mean[c]) / std[c] for R, G and B.
struct Normalization {
  std::array<float, 3> mean;
  std::array<float, 3> std;
  bool operator==(const Normalization&) const = default;
};

// fill() is const and must be safe to call from several threads at once: loaders assemble a batch
// in parallel.
class Dataset {
 public:
  virtual ~Dataset();
  virtual std::int64_t size() const = 0;
  virtual std::vector<std::int64_t> sample_shape() const = 0;   // {C, H, W}
  virtual int num_classes() const = 0;
  virtual std::string name() const = 0;
  // Writes sample `index` (0 <= index < size()) as C*H*W floats and its label (0 <= label < num_classes()).
  virtual void fill(std::int64_t index, float* image_out, std::int64_t& label_out) const = 0;
  // One half of a sample, for a rank that needs only the inputs (a pipeline's first stage) or only
  // the labels (its last). The defaults fill the whole sample.
  virtual void fill_image(std::int64_t index, float* image_out) const;
  virtual std::int64_t fill_label(std::int64_t index) const;
  // The sample as training epoch `epoch` sees it, for a data set whose augmentation draws anew each
  // epoch (the training loader calls these). The defaults ignore the epoch.
  virtual void fill_in_epoch(std::int64_t epoch, std::int64_t index, float* image_out, std::int64_t& label_out) const;
  virtual void fill_image_in_epoch(std::int64_t epoch, std::int64_t index, float* image_out) const;
  // The label fill_in_epoch would give, for a data set whose label can depend on the epoch (one that
  // replaces a sample it cannot decode with another). The default is fill_label.
  virtual std::int64_t fill_label_in_epoch(std::int64_t epoch, std::int64_t index) const;
};

}  // namespace pw::models::data
