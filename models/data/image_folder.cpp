// torchvision's ImageFolder layout: ROOT/{train,val}/CLASS/**/*.{jpg,jpeg,png}.
#include <filesystem>
#include <utility>

#include "core/error.h"
#include "core/input_file.h"
#include "models/data/image_dataset.h"
#include "models/data/image_folder_listing.h"

namespace pw::models::data {
namespace {

namespace fs = std::filesystem;

class ImageFolder final : public EncodedSource {
 public:
  // The listing is torchvision's ImageFolder order, the one `pipewright data pack` packs in.
  ImageFolder(const std::string& root, Split split) {
    const std::string part = split == Split::Train ? "train" : "val";
    name_ = "image folder " + root + " (" + part + ")";
    auto listing = list_image_folder(root);
    PW_INPUT_CHECK(split == Split::Train || listing.has_val,
                   "image folder " << root << " has no val/ folder; expected " << (fs::path(root) / "val").string()
                                   << "/CLASS/*.jpg (or .jpeg, .png)");
    classes_ = std::move(listing.classes);
    for (auto& image : split == Split::Train ? listing.train : listing.val) {
      files_.push_back(std::move(image.path));
      labels_.push_back(static_cast<std::int32_t>(image.label));
    }
  }

  std::int64_t size() const override { return static_cast<std::int64_t>(files_.size()); }
  std::vector<std::string> classes() const override { return classes_; }
  std::string name() const override { return name_; }
  std::int64_t label(std::int64_t index) const override { return labels_.at(static_cast<std::size_t>(index)); }

  EncodedSample read(std::int64_t index) const override {
    EncodedSample sample;
    sample.name = files_.at(static_cast<std::size_t>(index));
    sample.label = label(index);
    // A FIFO or device put in the folder after it was listed is refused, not waited on or streamed.
    sample.bytes = read_whole_bytes(sample.name, "image file", kMaxImageFileBytes, kMaxImageFileLimit);
    return sample;
  }

 private:
  std::string name_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<std::int32_t> labels_;
};

}  // namespace

std::unique_ptr<EncodedSource> open_image_folder(const std::string& root, Split split) {
  return std::make_unique<ImageFolder>(root, split);
}

}  // namespace pw::models::data
