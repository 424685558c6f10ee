#pragma once
// Data sets of labelled images and the factory that opens one by name. A Dataset produces one
// sample at a time into caller-owned memory; DataLoader (data_loader.h) batches them.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kernels/tensor.h"
#include "pipewright/enums.h"
#include "models/data/click_features.h"
#include "pipewright/dataset.h"

namespace pw::models::data {

class BadSampleLog;   // bad_sample_log.h

struct Batch {
  kernels::Tensor images;   // F32 [B, C, H, W] on cpu:0
  kernels::Tensor labels;   // I64 [B] on cpu:0
};

// Dataset and Split: pipewright/dataset.h.

// What of a data set a rank reads: a pipeline's first stage the inputs, its last the labels, a
// middle stage nothing (it learns the shapes only). Data sets made on the fly ignore it.
enum class DataParts { Both, Inputs, Labels, None };
inline bool reads_inputs(DataParts p) { return p == DataParts::Both || p == DataParts::Inputs; }
inline bool reads_labels(DataParts p) { return p == DataParts::Both || p == DataParts::Labels; }


// Fashion-MNIST from `dir` holding {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (the .gz form
// is tried first). Pixels are scaled to [0, 1] and then normalised with the training set's mean
// 0.2860 and standard deviation 0.3530, as PyTorch users of this set usually do.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
// With DataParts other than Both only the files needed are opened (None opens nothing: size() is
// then 0 and fill() an error).
std::unique_ptr<Dataset> open_fashion_mnist(const std::string& dir, Split split, DataParts parts = DataParts::Both);

// Synthetic images for benchmarks, of any size and shape, generated per index on the fly (nothing
// is materialised). Each class has its own plane-wave pattern per channel plus an offset; samples
// add uniform noise. Labels are learnable: a nearest-class-mean classifier already separates them.
// The same (seed, index) always gives the same sample; Split::Test draws other samples (labels and
// noise) around the same class patterns.
std::unique_ptr<Dataset> make_synthetic_images(std::int64_t size, kernels::Shape sample_shape, int num_classes,
                                               std::uint64_t seed, Split split = Split::Train);

struct DatasetOptions {
  // fashion-mnist: empty means kFashionMnistDefaultDir.
  std::string fashion_mnist_dir;
  // synthetic:
  kernels::Shape synthetic_shape = {1, 28, 28};
  std::int64_t synthetic_size = 0;   // 0: Fashion-MNIST's sizes (60000 train, 10000 test)
  int synthetic_classes = 10;
  std::uint64_t seed = 0;
  // synthetic-clicks (synthetic_clicks.h): synthetic_size training samples (0: 60000) and a sixth as many test samples:
  ClickFeatures clicks;
  DataParts parts = DataParts::Both;   // which files a file-backed set opens
  // image-folder (ROOT/train/CLASS/*, ROOT/val/CLASS/*) and cifar10: the folder, required.
  std::string data_dir;
  // image-folder: samples are 3 x image_size x image_size; augment "imagenet" or "none".
  int image_size = 224;
  Augment augment = Augment::ImageNet;
  // image-folder, shards: what an image that does not decode does, and where Skip records them
  // (image_dataset.h; may be null). Other data sets decode nothing that can fail and ignore both.
  BadSamples bad_samples = BadSamples::Fail;
  std::shared_ptr<BadSampleLog> bad_sample_log;
  // image-folder, shards, cifar10: unset means the data set's own (ImageNet's, CIFAR-10's).
  std::optional<Normalization> normalization;
};

// "fashion-mnist", "synthetic", "synthetic-clicks", "image-folder" or "cifar10"; any other name is an InputError listing these.
std::unique_ptr<Dataset> open_dataset(const std::string& name, Split split, const DatasetOptions& options = {});

// Parses "CxHxW" (e.g. "1x28x28", "3x224x224"); anything else is an InputError showing the form.
kernels::Shape parse_sample_shape(const std::string& text);

}  // namespace pw::models::data
