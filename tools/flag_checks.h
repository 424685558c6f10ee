#pragma once
// CLI11 validators that say what a flag accepts in words ("a whole number from 1 to 1024", "a
// number above 0"), where CLI11's own print the bound of a double in full (300 digits) and call a
// word that is not a number "not in range".
#include <cstdint>

#include <CLI/CLI.hpp>

namespace pw::tools {

CLI::Validator range(std::int64_t low, std::int64_t high);   // a whole number in [low, high]
CLI::Validator range(int low, int high);
CLI::Validator range(double low, double high);               // a number in [low, high]
extern const CLI::Validator NonNegative;                     // a number, 0 or more
extern const CLI::Validator Positive;                        // a number above 0

}  // namespace pw::tools
