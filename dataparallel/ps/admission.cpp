#include "dataparallel/ps/admission.h"

#include <algorithm>

#include "core/error.h"

namespace pw::dp {

namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

constexpr std::uint64_t kRowSalt[AdmissionSketch::kDepth] = {0x243F6A8885A308D3ULL, 0x13198A2E03707344ULL,
                                                             0xA4093822299F31D0ULL, 0x082EFA98EC4E6C89ULL};
constexpr std::uint64_t kMagic = 0x314d534344415750ULL;   // "PWADCSM1"

template <typename T>
void put(std::ostream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
T get(std::istream& in, const std::string& where) {
  T v{};
  in.read(reinterpret_cast<char*>(&v), sizeof v);
  PW_INPUT_CHECK(in.good(), where << " is cut short in its admission sketch");
  return v;
}

}  // namespace

AdmissionSketch::AdmissionSketch(std::size_t width) : width_(width), cells_(kDepth * width, 0) {
  PW_CHECK(width >= 1, "an admission sketch needs at least one counter per row");
}

std::size_t AdmissionSketch::cell(int row, std::int64_t key) const {
  const auto h = mix(static_cast<std::uint64_t>(key) ^ kRowSalt[row]);
  return static_cast<std::size_t>(row) * width_ + static_cast<std::size_t>(h % width_);
}

int AdmissionSketch::estimate(std::int64_t key) const {
  int least = 255;
  for (int r = 0; r < kDepth; ++r) least = std::min<int>(least, cells_[cell(r, key)]);
  return least;
}

int AdmissionSketch::add(std::int64_t key, int sightings) {
  std::size_t at[kDepth];
  int least = 255;
  for (int r = 0; r < kDepth; ++r) {
    at[r] = cell(r, key);
    least = std::min<int>(least, cells_[at[r]]);
  }
  const int now = std::min(255, least + std::max(sightings, 0));
  // Conservative update: a counter rises only as far as this key's new estimate needs.
  for (int r = 0; r < kDepth; ++r) cells_[at[r]] = static_cast<std::uint8_t>(std::max<int>(cells_[at[r]], now));
  since_halving_ += static_cast<std::uint64_t>(std::max(sightings, 0));
  if (since_halving_ >= width_) {
    for (auto& c : cells_) c = static_cast<std::uint8_t>(c >> 1);
    since_halving_ = 0;
    ++halvings_;
  }
  return now;
}

void AdmissionSketch::write(std::ostream& out) const {
  put(out, kMagic);
  put(out, static_cast<std::uint64_t>(width_));
  put(out, since_halving_);
  put(out, halvings_);
  out.write(reinterpret_cast<const char*>(cells_.data()), static_cast<std::streamsize>(cells_.size()));
}

void AdmissionSketch::read(std::istream& in, const std::string& where) {
  PW_INPUT_CHECK(get<std::uint64_t>(in, where) == kMagic, where << " holds no admission sketch where one belongs");
  const auto width = get<std::uint64_t>(in, where);
  PW_INPUT_CHECK(width == width_, where << " holds an admission sketch of width " << width << "; this table's is "
                                        << width_);
  since_halving_ = get<std::uint64_t>(in, where);
  halvings_ = get<std::uint64_t>(in, where);
  in.read(reinterpret_cast<char*>(cells_.data()), static_cast<std::streamsize>(cells_.size()));
  PW_INPUT_CHECK(in.good(), where << " is cut short in its admission sketch");
}

}  // namespace pw::dp
