#include "models/data/image_folder_listing.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/input_file.h"

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

// What a folder entry is, links followed (as torchvision's os.walk(..., followlinks=True) and
// DirEntry.is_dir() follow them). `error` is set when it cannot be told (a dangling link, a link
// loop such as `x -> x`, no permission).
struct EntryStat {
  struct stat st {};
  int error = 0;
  bool is_directory() const { return error == 0 && S_ISDIR(st.st_mode); }
};

EntryStat stat_entry(const fs::path& path) {
  EntryStat e;
  if (::stat(path.c_str(), &e.st) != 0) e.error = errno;
  return e;
}

std::string os_message(int error) { return std::error_code(error, std::generic_category()).message(); }

using FolderId = std::pair<dev_t, ino_t>;

std::vector<std::string> class_folders(const fs::path& split_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(split_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const EntryStat e = stat_entry(it->path());
    // A dangling link is no class folder (DirEntry.is_dir() is False for it); a link that cannot be
    // followed for another reason (a loop `x -> x`) is named rather than guessed at.
    PW_INPUT_CHECK(e.error == 0 || e.error == ENOENT,
                   "'" << it->path().string() << "' in the image folder cannot be followed: " << os_message(e.error)
                       << "; expected class folders (or links to folders) under " << split_dir.string());
    if (e.is_directory()) names.push_back(it->path().filename().string());
  }
  PW_INPUT_CHECK(!ec, "cannot list '" << split_dir.string() << "': " << ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

struct FoundImage {
  std::string folder;   // as walked (through links), as torchvision names it
  std::string name;
  std::int64_t bytes = 0;
  bool operator<(const FoundImage& o) const { return std::tie(folder, name) < std::tie(o.folder, o.name); }
};

// The folders `dir` is inside (itself, its parents up to /) as they are on disk, links resolved:
// a link below it that reaches one of them is a loop.
std::vector<FolderId> enclosing_folders(const fs::path& dir) {
  std::vector<FolderId> ids;
  std::error_code ec;
  fs::path at = fs::canonical(dir, ec);
  PW_INPUT_CHECK(!ec, "cannot open class folder '" << dir.string() << "': " << ec.message());
  for (;;) {
    const EntryStat e = stat_entry(at);
    if (e.error == 0) ids.emplace_back(e.st.st_dev, e.st.st_ino);
    if (at == at.parent_path() || at.empty()) break;
    at = at.parent_path();
  }
  return ids;
}

// Links to folders are followed, as torchvision follows them; a link back to a folder the walk is
// inside (`cat/up -> ..`, `cat/all -> /`) would list the same images again at every level, so it
// is one InputError naming the link (os.walk would descend until the kernel's ELOOP or
// ENAMETOOLONG stops it, listing every image dozens of times). A folder reached twice through
// links that do not loop (two links to one shared folder) is listed under both paths, as
// torchvision lists it. Links that reach folders along many paths (each level linking twice to the
// next) would make the listing exponential: a class lists at most kMaxFoldersPerClass folders.
constexpr std::size_t kMaxFoldersPerClass = 100000;

void walk(const fs::path& dir, std::vector<FolderId>& inside, std::vector<FoundImage>& found, std::size_t& folders) {
  PW_INPUT_CHECK(++folders <= kMaxFoldersPerClass,
                 "'" << dir.string() << "': its class lists more than " << kMaxFoldersPerClass
                     << " folders (links reaching the same folders along many paths?); an image folder's class "
                        "may hold at most that many, links followed");
  std::error_code ec;
  std::vector<std::pair<fs::path, EntryStat>> subfolders;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    const std::string name = path.filename().string();
    const bool image = !image_extension(name).empty();
    const EntryStat e = stat_entry(path);
    if (e.error != 0) {
      // os.walk takes an entry it cannot stat for a file; ImageFolder then keeps it only for an image name.
      PW_INPUT_CHECK(!image, "cannot read image file '" << path.string() << "': " << os_message(e.error)
                                                        << (e.error == ENOENT ? " (a dangling link?)" : ""));
      continue;
    }
    if (S_ISDIR(e.st.st_mode)) {
      subfolders.emplace_back(path, e);
      continue;
    }
    if (!image) continue;
    PW_INPUT_CHECK(S_ISREG(e.st.st_mode), "image file '" << path.string() << "' is " << file_kind_name(e.st.st_mode)
                                                          << ", not a regular file; expected JPEG or PNG files (or links to them)");
    found.push_back({dir.string(), name, static_cast<std::int64_t>(e.st.st_size)});
  }
  PW_INPUT_CHECK(!ec, "cannot list '" << dir.string() << "': " << ec.message());
  for (const auto& [path, e] : subfolders) {
    const FolderId id{e.st.st_dev, e.st.st_ino};
    if (std::find(inside.begin(), inside.end(), id) != inside.end()) {
      std::error_code ignored;
      const fs::path target = fs::canonical(path, ignored);
      throw InputError("'" + path.string() + "' leads back to '" + target.string() +
                       "', a folder it is inside (a loop of links); remove the link or point it elsewhere: links to "
                       "folders are followed, as torchvision's ImageFolder follows them, and a loop would list the same "
                       "images without end");
    }
    inside.push_back(id);
    walk(path, inside, found, folders);
    inside.pop_back();
  }
}

// torchvision walks each class folder with sorted(os.walk(..., followlinks=True)) and sorts each
// folder's file names: the order is by (folder path, file name), compared as strings.
std::vector<ListedImage> class_images(const fs::path& class_dir, const std::string& class_name, std::int64_t label) {
  std::vector<FoundImage> found;
  // The class folder's own enclosing folders, and its split folder's (they differ when the class
  // folder is itself a link): a link to any of them is a loop, named at the link.
  std::vector<FolderId> inside = enclosing_folders(class_dir);
  for (const FolderId& id : enclosing_folders(class_dir.parent_path()))
    if (std::find(inside.begin(), inside.end(), id) == inside.end()) inside.push_back(id);
  std::size_t folders = 0;
  walk(class_dir, inside, found, folders);
  PW_INPUT_CHECK(!found.empty(), "class folder '" << class_dir.string() << "' holds no .jpg, .jpeg or .png file");
  std::sort(found.begin(), found.end());
  std::vector<ListedImage> images;
  images.reserve(found.size());
  for (const auto& f : found) {
    const fs::path path = fs::path(f.folder) / f.name;
    ListedImage image;
    image.path = path.string();
    image.relative = class_name + "/" + path.lexically_relative(class_dir).generic_string();
    image.extension = image_extension(f.name);
    image.label = label;
    image.bytes = f.bytes;
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
  std::error_code ec;
  PW_INPUT_CHECK(fs::is_directory(train_dir, ec), "image folder '" << root << "' has no train/ folder (expected ROOT/train/CLASS/*.jpg and optionally ROOT/val/CLASS/*.jpg)");
  ImageFolderListing listing;
  listing.root = root;
  listing.classes = class_folders(train_dir);
  PW_INPUT_CHECK(!listing.classes.empty(), "'" << train_dir.string() << "' holds no class folder (expected ROOT/train/CLASS/*.jpg)");
  listing.train = split_images(train_dir, listing.classes);
  listing.has_val = fs::is_directory(val_dir, ec);
  if (listing.has_val) {
    const auto val_classes = class_folders(val_dir);
    PW_INPUT_CHECK(val_classes == listing.classes, "the class folders of '" << val_dir.string() << "' (" << joined(val_classes)
                   << ") differ from those of '" << train_dir.string() << "' (" << joined(listing.classes) << "); labels would disagree");
    listing.val = split_images(val_dir, listing.classes);
  }
  return listing;
}

}  // namespace pw::models::data
