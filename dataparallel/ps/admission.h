#pragma once
// Counts sightings of ids not yet admitted to a bounded table, in bounded memory: a count-min
// sketch (kDepth rows of `width` one-byte saturating counters, conservative update). The
// estimate of an id is never below its true count in the current window, and above it only when
// all its kDepth counters are shared with other ids: such an id is admitted early (a false
// positive), never late. So that the counters do not fill up under an endless stream of new ids,
// every `width` sightings all counters are halved (as TinyLFU does): sightings older than that
// window count half. Deterministic, so replaying a log rebuilds the same sketch.
#include <cstddef>
#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

namespace pw::dp {

class AdmissionSketch {
 public:
  static constexpr int kDepth = 4;
  static constexpr std::size_t kDefaultWidth = std::size_t{1} << 20;   // 4 MiB of counters

  explicit AdmissionSketch(std::size_t width = kDefaultWidth);

  // Adds `sightings` sightings of `key`; returns its estimated count afterwards (at most 255).
  int add(std::int64_t key, int sightings);
  int estimate(std::int64_t key) const;
  std::size_t width() const { return width_; }
  std::uint64_t halvings() const { return halvings_; }

  void write(std::ostream& out) const;
  void read(std::istream& in, const std::string& where);   // InputError if cut short or of another width
  friend bool operator==(const AdmissionSketch&, const AdmissionSketch&) = default;

 private:
  std::size_t cell(int row, std::int64_t key) const;

  std::size_t width_;
  std::vector<std::uint8_t> cells_;   // kDepth * width_
  std::uint64_t since_halving_ = 0;   // sightings added since the counters were last halved
  std::uint64_t halvings_ = 0;
};

}  // namespace pw::dp
