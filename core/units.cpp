#include "core/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"

namespace pw {

std::int64_t parse_bytes(std::string_view text) {
  const std::string s(text);
  std::size_t pos = 0;
  double value = 0.0;
  bool parsed = false;
  try {
    value = std::stod(s, &pos);
    parsed = true;
  } catch (const std::exception&) {
  }
  std::string unit = parsed ? s.substr(pos) : std::string();
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = -1.0;
  if (unit.empty() || unit == "b") scale = 1.0;
  else if (unit == "k" || unit == "kb") scale = 1e3;
  else if (unit == "m" || unit == "mb") scale = 1e6;
  else if (unit == "g" || unit == "gb") scale = 1e9;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024.0;
  else if (unit == "gib") scale = 1024.0 * 1024.0 * 1024.0;
  else if (unit == "tib") scale = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  PW_INPUT_CHECK(parsed && scale > 0 && value >= 0 && std::isfinite(value),
                 "bad byte size '" << s << "'; expected a number with an optional unit B, KB, MB, GB, KiB, MiB, GiB or TiB (e.g. 512MiB)");
  return static_cast<std::int64_t>(std::llround(value * scale));
}

std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace pw
