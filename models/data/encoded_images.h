#pragma once
// Data sets of encoded images (JPEG, PNG) and their labels: an image folder, tar shards. A source
// says where sample i's bytes and label are; make_image_dataset decodes and transforms them into
// the fixed-size F32 samples the engine trains on. A source that can give a label without reading
// the image (from a folder name, from an index) makes the last stage of a pipeline read no images.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/data/dataset.h"

namespace pw::models::data {

struct EncodedSample {
  std::vector<std::uint8_t> bytes;   // the file's bytes as stored (JPEG or PNG)
  std::string name;                  // file path or shard member, for error messages
  std::int64_t label = 0;
};

class EncodedSource {
 public:
  virtual ~EncodedSource() = default;
  virtual std::int64_t size() const = 0;
  virtual std::vector<std::string> classes() const = 0;   // label i is classes()[i]
  // Safe to call from several threads at once.
  virtual EncodedSample read(std::int64_t index) const = 0;
  virtual std::int64_t label(std::int64_t index) const = 0;   // without reading the image
  virtual std::string name() const = 0;                       // "image folder /data/x (train)"
};

}  // namespace pw::models::data
