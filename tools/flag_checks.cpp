#include "tools/flag_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pw::tools {
namespace {

std::string number_text(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", v);
  return buffer;
}

// The value as a finite number, or nullopt-like false with `why` set.
bool parse_number(const std::string& text, double& value, std::string& why, const std::string& expected) {
  errno = 0;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0') {
    why = "'" + text + "' is not a number; expected " + expected;
    return false;
  }
  if (errno == ERANGE || !std::isfinite(value)) {
    why = "'" + (text.size() > 24 ? text.substr(0, 24) + "..." : text) + "' is out of range; expected " + expected;
    return false;
  }
  return true;
}

CLI::Validator make(const std::string& expected, bool whole, double low, double high, bool low_open) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        std::string why;
        if (!parse_number(text, v, why, expected)) return why;
        if (whole && std::floor(v) != v) return "got " + text + ", not a whole number; expected " + expected;
        if ((low_open ? !(v > low) : !(v >= low)) || !(v <= high)) return "got " + text + "; expected " + expected;
        return {};
      },
      expected);
}

}  // namespace

CLI::Validator range(std::int64_t low, std::int64_t high) {
  return make("a whole number from " + std::to_string(low) + " to " + std::to_string(high), true,
              static_cast<double>(low), static_cast<double>(high), false);
}

CLI::Validator range(int low, int high) { return range(std::int64_t{low}, std::int64_t{high}); }

CLI::Validator range(double low, double high) {
  return make("a number from " + number_text(low) + " to " + number_text(high), false, low, high, false);
}

const CLI::Validator NonNegative = make("a number, 0 or more", false, 0.0, HUGE_VAL, false);
const CLI::Validator Positive = make("a number above 0", false, 0.0, HUGE_VAL, true);

}  // namespace pw::tools
