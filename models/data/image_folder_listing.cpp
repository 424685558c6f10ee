#include "models/data/image_folder_listing.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/error.h"

namespace fs = std::filesystem;

namespace pw::models::data {

std::string image_extension(const std::string& file_name) {
  const auto dot = file_name.rfind('.');
  if (dot == std::string::npos) return {};
  std::string ext = file_name.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == "jpg" || ext == "jpeg" || ext == "png" ? ext : std::string();
}

namespace {

std::vector<std::string> class_folders(const fs::path& split_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(split_dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory()) names.push_back(it->path().filename().string());
  PW_INPUT_CHECK(!ec, "cannot list '" << split_dir.string() << "': " << ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

// torchvision walks each class folder with sorted(os.walk(..., followlinks=True)) and sorts each
// folder's file names: the order is by (folder path, file name), compared as strings.
std::vector<ListedImage> class_images(const fs::path& class_dir, const std::string& class_name, std::int64_t label) {
  std::vector<std::pair<std::string, std::string>> found;   // (folder, file name)
  std::error_code ec;
  fs::recursive_directory_iterator it(class_dir, fs::directory_options::follow_directory_symlink, ec);
  for (fs::recursive_directory_iterator end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory()) continue;
    const std::string name = it->path().filename().string();
    if (!image_extension(name).empty()) found.emplace_back(it->path().parent_path().string(), name);
  }
  PW_INPUT_CHECK(!ec, "cannot list '" << class_dir.string() << "': " << ec.message());
  PW_INPUT_CHECK(!found.empty(), "class folder '" << class_dir.string() << "' holds no .jpg, .jpeg or .png file");
  std::sort(found.begin(), found.end());
  std::vector<ListedImage> images;
  images.reserve(found.size());
  for (const auto& [folder, name] : found) {
    const fs::path path = fs::path(folder) / name;
    ListedImage image;
    image.path = path.string();
    image.relative = class_name + "/" + path.lexically_relative(class_dir).generic_string();
    image.extension = image_extension(name);
    image.label = label;
    const auto bytes = fs::file_size(path, ec);
    PW_INPUT_CHECK(!ec, "cannot read '" << image.path << "': " << ec.message());
    image.bytes = static_cast<std::int64_t>(bytes);
    images.push_back(std::move(image));
  }
  return images;
}

std::vector<ListedImage> split_images(const fs::path& split_dir, const std::vector<std::string>& classes) {
  std::vector<ListedImage> images;
  for (std::size_t label = 0; label < classes.size(); ++label) {
    auto more = class_images(split_dir / classes[label], classes[label], static_cast<std::int64_t>(label));
    images.insert(images.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  return images;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

ImageFolderListing list_image_folder(const std::string& root) {
  const fs::path train_dir = fs::path(root) / "train";
  const fs::path val_dir = fs::path(root) / "val";
  PW_INPUT_CHECK(fs::is_directory(train_dir), "image folder '" << root << "' has no train/ folder (expected ROOT/train/CLASS/*.jpg and optionally ROOT/val/CLASS/*.jpg)");
  ImageFolderListing listing;
  listing.root = root;
  listing.classes = class_folders(train_dir);
  PW_INPUT_CHECK(!listing.classes.empty(), "'" << train_dir.string() << "' holds no class folder (expected ROOT/train/CLASS/*.jpg)");
  listing.train = split_images(train_dir, listing.classes);
  listing.has_val = fs::is_directory(val_dir);
  if (listing.has_val) {
    const auto val_classes = class_folders(val_dir);
    PW_INPUT_CHECK(val_classes == listing.classes, "the class folders of '" << val_dir.string() << "' (" << joined(val_classes)
                   << ") differ from those of '" << train_dir.string() << "' (" << joined(listing.classes) << "); labels would disagree");
    listing.val = split_images(val_dir, listing.classes);
  }
  return listing;
}

}  // namespace pw::models::data
