#pragma once
// The table-bound flags shared by `pipewright train` (--ps-admit-after, --ps-max-rows,
// --ps-row-ttl) and `pipewright ps serve` (--admit-after, --max-rows, --row-ttl).
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace pw::tools {

// Adds the three options named prefix + "admit-after" etc.; a value outside what is accepted is
// refused with one line saying what is. Leaving a flag out keeps the given default (no bound).
void add_table_bound_options(CLI::App& cmd, int& admit_after, std::int64_t& max_rows, std::int64_t& row_ttl,
                             const std::string& prefix);
// Whether any of them was given on the command line.
bool table_bounds_given(const CLI::App& cmd, const std::string& prefix);

}  // namespace pw::tools
