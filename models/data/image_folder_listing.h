#pragma once
// The files of an image folder in torchvision ImageFolder's order: ROOT/train/CLASS/... and
// ROOT/val/CLASS/..., classes the sorted folder names, files with a .jpg, .jpeg or .png name (any
// case, in subfolders too) sorted as torchvision's sorted(os.walk(...)) then sorted(fnames).
#include <cstdint>
#include <string>
#include <vector>

namespace pw::models::data {

// The largest encoded image (JPEG, PNG) read: a file beyond it is refused before it is read (far
// above PIL's decompression-bomb limit of 179 million pixels, about 537 MB as raw RGB).
inline constexpr std::int64_t kMaxImageFileBytes = std::int64_t{1} << 30;
inline constexpr const char* kMaxImageFileLimit = "1 GiB; larger is no JPEG or PNG a data set trains on";

struct ListedImage {
  std::string path;        // as opened
  std::string relative;    // "CLASS/sub/file.jpg", for names and messages
  std::string extension;   // lower case, without the dot: "jpg", "jpeg", "png"
  std::int64_t label = 0;
  std::int64_t bytes = 0;
};

struct ImageFolderListing {
  std::string root;
  std::vector<std::string> classes;   // from ROOT/train
  std::vector<ListedImage> train;
  std::vector<ListedImage> val;       // empty when ROOT/val is absent
  bool has_val = false;
};

// InputError (one line) when ROOT/train is missing, a class folder holds no image, or ROOT/val's
// class folders differ from ROOT/train's (the labels would then disagree).
ImageFolderListing list_image_folder(const std::string& root);

// "jpg", "jpeg" or "png" for an image name (any case), otherwise empty.
std::string image_extension(const std::string& file_name);

}  // namespace pw::models::data
