#include "dataparallel/ps/bounds.h"

#include "core/error.h"

namespace pw::dp {

void check_table_bounds(const TableBounds& b, const std::string& table) {
  PW_INPUT_CHECK(b.admit_after >= 1 && b.admit_after <= kMaxAdmitAfter,
                 "table '" << table << "': admit after " << b.admit_after << " sightings; expected 1 to "
                           << kMaxAdmitAfter << " (1: every id at once)");
  PW_INPUT_CHECK(b.max_rows >= 0, "table '" << table << "': a cap of " << b.max_rows
                                            << " rows per shard; expected a positive count (0: no cap)");
  PW_INPUT_CHECK(b.row_ttl >= 0, "table '" << table << "': a row time-to-live of " << b.row_ttl
                                           << " steps; expected a positive count (0: rows never expire)");
}

std::string describe_bounds(const TableBounds& b) {
  std::string out = "admit after " + std::to_string(b.admit_after) + ", ";
  out += b.max_rows > 0 ? "at most " + std::to_string(b.max_rows) + " rows per shard" : "no row cap";
  out += b.row_ttl > 0 ? ", rows expire after " + std::to_string(b.row_ttl) + " steps" : ", rows never expire";
  return out;
}

}  // namespace pw::dp
