#include "tools/ps_bound_flags.h"

#include "dataparallel/ps/bounds.h"

namespace pw::tools {

namespace {

// A whole number in [low, high]; otherwise `accepted` is the message.
CLI::Validator whole_in(long long low, long long high, const std::string& accepted) {
  return CLI::Validator(
      [low, high, accepted](std::string& text) -> std::string {
        try {
          std::size_t used = 0;
          const long long v = std::stoll(text, &used);
          if (used == text.size() && v >= low && v <= high) return {};
        } catch (const std::exception&) {
        }
        return "got " + text + "; expected " + accepted;
      },
      "");
}

}  // namespace

void add_table_bound_options(CLI::App& cmd, int& admit_after, std::int64_t& max_rows, std::int64_t& row_ttl,
                             const std::string& prefix) {
  cmd.add_option(prefix + "admit-after", admit_after,
                 "make a table row only on its id's N-th sighting (a push carrying it); until then pulls get the "
                 "id's initial row and its gradients are dropped (default 1: at once)")
      ->check(whole_in(1, dp::kMaxAdmitAfter, "1 to " + std::to_string(dp::kMaxAdmitAfter) + " sightings"));
  cmd.add_option(prefix + "max-rows", max_rows,
                 "keep at most R rows of each table per server, evicting the least recently updated "
                 "(default: no cap)")
      ->check(whole_in(1, INT64_MAX, "a positive row count (leave the flag out for no cap)"));
  cmd.add_option(prefix + "row-ttl", row_ttl,
                 "drop a row after STEPS steps without an update (default: never)")
      ->check(whole_in(1, INT64_MAX, "a positive number of steps (leave the flag out for rows that never expire)"));
}

bool table_bounds_given(const CLI::App& cmd, const std::string& prefix) {
  return cmd.count(prefix + "admit-after") + cmd.count(prefix + "max-rows") + cmd.count(prefix + "row-ttl") > 0;
}

}  // namespace pw::tools
