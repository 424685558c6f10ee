// torchvision's ImageFolder layout: ROOT/{train,val}/CLASS/**/*.{jpg,jpeg,png}.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "core/error.h"
#include "models/data/image_dataset.h"

namespace pw::models::data {
namespace {

namespace fs = std::filesystem;

bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// A class folder's images in torchvision's order: sorted(os.walk(...)), each folder's names sorted.
std::vector<std::string> images_under(const fs::path& class_dir) {
  std::vector<std::pair<std::string, std::string>> found;   // (folder, file name)
  for (const auto& entry : fs::recursive_directory_iterator(class_dir, fs::directory_options::follow_directory_symlink))
    if (entry.is_regular_file() && is_image_file(entry.path()))
      found.emplace_back(entry.path().parent_path().string(), entry.path().filename().string());
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (const auto& [dir, file] : found) paths.push_back((fs::path(dir) / file).string());
  return paths;
}

class ImageFolder final : public EncodedSource {
 public:
  ImageFolder(const std::string& root, Split split) {
    const std::string part = split == Split::Train ? "train" : "val";
    const fs::path dir = fs::path(root) / part;
    name_ = "image folder " + root + " (" + part + ")";
    PW_INPUT_CHECK(fs::is_directory(dir), "image folder " << root << " has no " << part << "/ folder; expected "
                                                          << dir.string() << "/CLASS/*.jpg (or .jpeg, .png)");
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
    std::sort(classes_.begin(), classes_.end());
    PW_INPUT_CHECK(!classes_.empty(), dir.string() << " has no class folders; expected " << dir.string()
                                                   << "/CLASS/*.jpg (or .jpeg, .png)");
    for (std::size_t c = 0; c < classes_.size(); ++c) {
      const auto images = images_under(dir / classes_[c]);
      PW_INPUT_CHECK(!images.empty(), (dir / classes_[c]).string() << " has no .jpg, .jpeg or .png files");
      files_.insert(files_.end(), images.begin(), images.end());
      labels_.insert(labels_.end(), images.size(), static_cast<std::int32_t>(c));
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
    std::ifstream in(sample.name, std::ios::binary);
    PW_INPUT_CHECK(in, sample.name << ": cannot open (" << name_ << ")");
    sample.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    PW_INPUT_CHECK(!in.bad(), sample.name << ": read error");
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
