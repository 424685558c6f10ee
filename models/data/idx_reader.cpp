#include "models/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include <unistd.h>

#include "core/error.h"
#include "core/input_file.h"

namespace pw::models::data {
namespace {

// gzdopen/gzread read plain files as they are, so one path serves both forms. The file is opened
// through core/input_file.h (a FIFO, a device or a folder is refused before anything blocks or
// streams), and what it can hold is known before its payload is read.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    InputFile input(path, "IDX file");
    size_ = input.size();
    unsigned char magic[2] = {0, 0};
    gzip_ = input.read_some_at(magic, sizeof magic, 0) == sizeof magic && magic[0] == 0x1f && magic[1] == 0x8b;
    const int fd = input.release();
    file_ = gzdopen(fd, "rb");
    if (file_ == nullptr) {
      ::close(fd);
      throw InputError("cannot open '" + path + "': out of memory; expected an IDX file, gzip-compressed or plain");
    }
  }
  ~GzFile() { gzclose(file_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // The most bytes the file can yield after a header of `header_bytes`: the rest of a plain file, or
  // what deflate's largest ratio (1032:1) makes of a gzip file's bytes.
  std::int64_t capacity(std::int64_t header_bytes) const {
    constexpr std::int64_t kDeflateMaxRatio = 1032;
    if (!gzip_) return std::max<std::int64_t>(0, size_ - header_bytes);
    if (size_ > std::numeric_limits<std::int64_t>::max() / kDeflateMaxRatio) return std::numeric_limits<std::int64_t>::max();
    return size_ * kDeflateMaxRatio;
  }
  bool gzip() const { return gzip_; }
  // "its 47040016 bytes" or "its 26421880 gzip-compressed bytes (deflate inflates at most 1032 times)".
  std::string holds() const {
    return "its " + std::to_string(size_) + (gzip_ ? " gzip-compressed bytes (deflate inflates at most 1032 times)" : " bytes");
  }

  // Reads up to `bytes` bytes, appending them to `out`; returns how many arrived before the end.
  // A gzip stream cut off mid-way ends like a short plain file (Z_BUF_ERROR), so callers report both
  // as truncation with the byte counts.
  std::int64_t read_append(std::vector<std::uint8_t>& out, std::int64_t bytes) {
    constexpr std::int64_t kChunk = 1 << 20;
    std::int64_t got = 0;
    while (got < bytes) {
      const auto want = static_cast<unsigned>(std::min(kChunk, bytes - got));
      const std::size_t old_size = out.size();
      out.resize(old_size + want);
      const int n = gzread(file_, out.data() + old_size, want);
      out.resize(old_size + static_cast<std::size_t>(std::max(n, 0)));
      if (n < 0) {
        int code = Z_OK;
        const char* message = gzerror(file_, &code);
        if (code == Z_BUF_ERROR) break;
        throw InputError("'" + path_ + "' is not a readable IDX file: " + (message ? message : "read error") +
                         "; expected gzip-compressed or plain IDX data");
      }
      if (n == 0) break;
      got += n;
    }
    return got;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
  std::int64_t size_ = 0;
  bool gzip_ = false;
};

std::uint32_t big_endian_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

// Reads the magic and `ndims` dimensions; checks the magic.
std::vector<std::int64_t> read_header(GzFile& file, const std::string& path, std::uint32_t magic, int ndims,
                                      const char* kind) {
  std::vector<std::uint8_t> header;
  const std::int64_t header_bytes = 4 + 4 * ndims;
  const std::int64_t got = file.read_append(header, header_bytes);
  PW_INPUT_CHECK(got >= 4, "'" << path << "' is truncated: expected a " << header_bytes << "-byte IDX header, got "
                               << got << " bytes");
  const std::uint32_t found = big_endian_u32(header.data());
  PW_INPUT_CHECK(found == magic, "'" << path << "' is not an IDX " << kind << " file: magic " << hex32(found)
                                     << ", expected " << hex32(magic) << " (unsigned bytes, " << ndims
                                     << (ndims == 1 ? " dimension)" : " dimensions)"));
  PW_INPUT_CHECK(got == header_bytes, "'" << path << "' is truncated: expected a " << header_bytes
                                          << "-byte IDX header, got " << got << " bytes");
  std::vector<std::int64_t> dims;
  for (int i = 0; i < ndims; ++i) dims.push_back(big_endian_u32(header.data() + 4 + 4 * i));
  return dims;
}

void read_payload(GzFile& file, const std::string& path, std::int64_t expected, const char* what,
                  std::vector<std::uint8_t>& out) {
  out.reserve(static_cast<std::size_t>(std::min<std::int64_t>(expected, std::int64_t{1} << 28)));
  const std::int64_t got = file.read_append(out, expected);
  PW_INPUT_CHECK(got == expected, "'" << path << "' is truncated: expected " << expected << " bytes of " << what
                                      << ", got " << got);
}

// Refuses a payload the header declares but the file cannot hold, before reading or allocating it:
// a plain file is then truncated; a gzip file would have to inflate beyond deflate's ratio.
void check_capacity(const GzFile& file, const std::string& path, std::int64_t header_bytes, std::int64_t expected,
                    const char* what) {
  const std::int64_t capacity = file.capacity(header_bytes);
  if (expected <= capacity) return;
  if (!file.gzip())
    throw InputError("'" + path + "' is truncated: expected " + std::to_string(expected) + " bytes of " + what + ", got " +
                     std::to_string(capacity));
  throw InputError("'" + path + "' declares " + std::to_string(expected) + " bytes of " + what + ", more than " +
                   file.holds() + " can hold; expected an IDX file whose header matches its data");
}

}  // namespace

IdxImages read_idx_images(const std::string& path) {
  GzFile file(path);
  const auto dims = read_header(file, path, kIdxImagesMagic, 3, "images");
  IdxImages images;
  images.count = dims[0];
  images.rows = dims[1];
  images.cols = dims[2];
  PW_INPUT_CHECK(images.rows > 0 && images.cols > 0, "'" << path << "' declares images of " << images.rows << "x"
                                                         << images.cols << " pixels; expected both sides positive");
  // Each dimension is below 2^32: the products are checked before they are formed (none
  // overflows), then against what the file can hold, before anything is allocated for them.
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  PW_INPUT_CHECK(images.rows <= kMax / images.cols && images.count <= kMax / (images.rows * images.cols),
                 "'" << path << "' declares " << images.count << " images of " << images.rows << "x" << images.cols
                     << ", more bytes than any file can hold");
  const std::int64_t expected = images.count * images.rows * images.cols;
  check_capacity(file, path, 4 + 4 * 3, expected, "pixel data");
  read_payload(file, path, expected, "pixel data", images.pixels);
  return images;
}

IdxLabels read_idx_labels(const std::string& path) {
  GzFile file(path);
  const auto dims = read_header(file, path, kIdxLabelsMagic, 1, "labels");
  check_capacity(file, path, 4 + 4, dims[0], "label data");
  IdxLabels labels;
  read_payload(file, path, dims[0], "label data", labels.labels);
  return labels;
}

}  // namespace pw::models::data
