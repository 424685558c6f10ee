#pragma once
// Writes a small image folder (ROOT/train/CLASS/..., ROOT/val/CLASS/...) of made-up bytes under
// .jpg/.jpeg/.png names, for the container tests of packing and tar shards (nothing decodes
// them). Removed afterwards. `expected` lists the files in torchvision ImageFolder's order.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace pw::test {

struct ExpectedImage {
  std::string relative;   // "cat/a.jpg"
  std::int64_t label = 0;
  std::vector<std::uint8_t> bytes;
};

class ImageFolderFiles {
 public:
  explicit ImageFolderFiles(const std::string& tag)
      : base_(std::filesystem::temp_directory_path() / ("pw_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(base_);
    std::filesystem::create_directories(base_);
  }
  ~ImageFolderFiles() {
    std::error_code ignored;
    std::filesystem::remove_all(base_, ignored);
  }
  ImageFolderFiles(const ImageFolderFiles&) = delete;
  ImageFolderFiles& operator=(const ImageFolderFiles&) = delete;

  std::string root() const { return (base_ / "images").string(); }
  std::string path(const std::string& name) const { return (base_ / name).string(); }

  // Classes cat, dog, fox. Names chosen so that byte order, subfolders and extension case matter:
  // torchvision's order is by (folder, name), so "cat/a10.jpg" < "cat/a2.png" < "cat/b.JPEG" <
  // "cat/sub/a.jpg"; "notes.txt" is not an image and is skipped.
  void write_default() {
    const std::vector<std::string> train = {"cat/a10.jpg", "cat/a2.png", "cat/b.JPEG", "cat/sub/a.jpg", "dog/x.png",
                                            "dog/y.jpeg",  "dog/z.jpg",  "fox/0.png",  "fox/1.png",     "fox/2.jpg"};
    const std::vector<std::string> val = {"cat/v.jpg", "dog/v.png", "fox/v.jpg", "fox/w.png"};
    std::mt19937 rng(42);
    for (const auto& name : train) train_.push_back(write("train", name, rng));
    for (const auto& name : val) val_.push_back(write("val", name, rng));
    write_raw("images/train/cat/notes.txt", {'h', 'i'});
  }
  const std::vector<ExpectedImage>& train() const { return train_; }
  const std::vector<ExpectedImage>& val() const { return val_; }

  void write_raw(const std::string& name, const std::vector<std::uint8_t>& bytes) const {
    const auto p = base_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }

 private:
  ExpectedImage write(const std::string& split, const std::string& relative, std::mt19937& rng) {
    ExpectedImage e;
    e.relative = relative;
    const std::string cls = relative.substr(0, relative.find('/'));
    e.label = cls == "cat" ? 0 : cls == "dog" ? 1 : 2;
    e.bytes.resize(std::uniform_int_distribution<std::size_t>(1, 3000)(rng));
    for (auto& b : e.bytes) b = static_cast<std::uint8_t>(rng());
    write_raw("images/" + split + "/" + relative, e.bytes);
    return e;
  }

  std::filesystem::path base_;
  std::vector<ExpectedImage> train_;
  std::vector<ExpectedImage> val_;
};

}  // namespace pw::test
