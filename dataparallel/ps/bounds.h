#pragma once
// How large a server-held table may grow (issue 16, item 3): ids are admitted as rows only on
// their N-th sighting, a shard keeps at most `max_rows` rows of the table (the least recently
// updated leave first), and rows not updated for `row_ttl` steps expire. Also the order rows
// were last updated in, which LRU eviction and expiry read.
#include <cstdint>
#include <list>
#include <string>
#include <vector>

namespace pw::dp {

struct TableBounds {
  int admit_after = 1;          // a row is created on the id's N-th sighting (a push carrying it); 1..255
  std::int64_t max_rows = 0;    // rows of the table per shard; 0: no cap
  std::int64_t row_ttl = 0;     // steps a row may go without an update; 0: forever
  friend bool operator==(const TableBounds&, const TableBounds&) = default;
  bool admits_all() const { return admit_after <= 1; }
  bool tracks_recency() const { return max_rows > 0 || row_ttl > 0; }
  bool any() const { return !admits_all() || tracks_recency(); }
};
inline constexpr int kMaxAdmitAfter = 255;   // the admission sketch's counters are one byte

void check_table_bounds(const TableBounds& bounds, const std::string& table);   // InputError naming the field
std::string describe_bounds(const TableBounds& bounds);   // "admit after 2, at most 100000 rows, ttl 50 steps"

// What one update of a table did besides changing rows: ids admitted (rows created), rows evicted
// to stay under the cap, rows expired, and gradient rows dropped because their id was not yet
// admitted. The write-ahead log records it after the push that caused it.
struct ApplyEffects {
  std::vector<std::int64_t> admitted, evicted, expired;
  std::int64_t dropped = 0;
  bool empty() const { return admitted.empty() && evicted.empty() && expired.empty() && dropped == 0; }
  void clear() { *this = ApplyEffects{}; }
  friend bool operator==(const ApplyEffects&, const ApplyEffects&) = default;
};

// Rows in the order of their last update, newest first; each with the step clock of that update.
// Not thread-safe (the table serialises its updates).
class RecencyList {
 public:
  struct Entry {
    std::int64_t key;
    std::int64_t stamp;
  };
  using Handle = std::list<Entry>::iterator;

  Handle add(std::int64_t key, std::int64_t stamp) {
    entries_.push_front({key, stamp});
    return entries_.begin();
  }
  void touch(Handle h, std::int64_t stamp) {
    h->stamp = stamp;
    entries_.splice(entries_.begin(), entries_, h);
  }
  void remove(Handle h) { entries_.erase(h); }
  bool empty() const { return entries_.empty(); }
  const Entry& oldest() const { return entries_.back(); }
  Handle oldest_handle() { return std::prev(entries_.end()); }
  void clear() { entries_.clear(); }
  // Oldest first (the order a snapshot writes them in, so reading them back restores the order).
  template <typename F>
  void for_each_oldest_first(F f) const {
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) f(*it);
  }

 private:
  std::list<Entry> entries_;
};

}  // namespace pw::dp
