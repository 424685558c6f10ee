#pragma once
// Writes small IDX files (plain or gzip) into a temporary folder that is removed afterwards.
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/error.h"

namespace pw::test {

enum class Compression { Plain, Gzip };

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("pw_test_data_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void append_big_endian(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

inline std::vector<std::uint8_t> idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims,
                                           const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> out;
  append_big_endian(out, magic);
  for (auto d : dims) append_big_endian(out, d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

inline void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes, Compression compression) {
  if (compression == Compression::Plain) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    BOOST_REQUIRE(f.good());
    return;
  }
  gzFile f = gzopen(path.c_str(), "wb");
  BOOST_REQUIRE(f != nullptr);
  if (!bytes.empty()) BOOST_REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) > 0);
  BOOST_REQUIRE(gzclose(f) == Z_OK);
}

inline std::vector<std::uint8_t> read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// True when `e` is an InputError whose message mentions `needle`; the predicate for BOOST_CHECK_EXCEPTION.
struct MessageMentions {
  std::string needle;
  bool operator()(const InputError& e) const {
    const std::string what = e.what();
    BOOST_TEST_MESSAGE("InputError: " << what);
    return what.find(needle) != std::string::npos && what.find('\n') == std::string::npos;
  }
};

}  // namespace pw::test
