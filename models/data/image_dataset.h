#pragma once
// Data sets of real images: encoded images (an image folder, shards) decoded and transformed by
// torchvision's ImageNet recipe into 3 x S x S floats, and CIFAR-10's binary batches.
#include <memory>
#include <string>

#include "models/data/dataset.h"
#include "models/data/encoded_images.h"
#include "pipewright/enums.h"
#include "models/data/image_resample.h"

namespace pw::models::data {

// Augment: pipewright/enums.h.

class BadSampleLog;

struct ImageOptions {
  int size = 224;   // S
  Augment augment = Augment::ImageNet;
  Normalization normalization = kImageNetNormalization;
  std::uint64_t seed = 0;
  BadSamples bad_samples = BadSamples::Fail;
  // With Skip: where the samples that would not decode are recorded, by the calls that fill images
  // (so a pipeline's last stage, which fills labels only, records nothing). May be null.
  std::shared_ptr<BadSampleLog> bad_sample_log;
};


// Split::Train with Augment::ImageNet draws RandomResizedCrop + flip per (seed, epoch, index)
// (fill() is epoch 0); otherwise every sample gets Resize + CenterCrop. With BadSamples::Fail an
// image that does not decode is a one-line InputError naming it, and labels come from the source
// without decoding. With Skip sample i is, in its place, the first of i + 1, i + 2, ... (wrapping)
// that decodes, image and label, transformed as sample i would be; finding its label takes the
// decode. `source` may be null for a rank that reads nothing (size() is then 0).
std::unique_ptr<Dataset> make_image_dataset(std::unique_ptr<EncodedSource> source, ImageOptions options, Split split,
                                            int num_classes = 0);

// ROOT/train/CLASS/* or ROOT/val/CLASS/* (.jpg, .jpeg, .png in any case), as torchvision's
// ImageFolder: classes are the sorted folder names, files in sorted order.
std::unique_ptr<EncodedSource> open_image_folder(const std::string& root, Split split);

// CIFAR-10's binary form in `dir`: data_batch_1.bin ... data_batch_5.bin (train) or test_batch.bin,
// each record a label byte and 3072 bytes of 32x32 planes R, G, B. Samples are 3x32x32, normalised
// with CIFAR-10's mean and std unless `normalization` is given.
inline constexpr Normalization kCifar10Normalization{{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};
std::unique_ptr<Dataset> open_cifar10(const std::string& dir, Split split, DataParts parts = DataParts::Both,
                                      const Normalization& normalization = kCifar10Normalization);

}  // namespace pw::models::data
