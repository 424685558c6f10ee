#include "models/data/shards/brace_pattern.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"

namespace pw::models::data::shards {
namespace {

constexpr std::int64_t kMaxBraceNames = 10'000'000;

bool parse_integer(const std::string& text, long long& value) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end;
}

bool zero_padded(const std::string& text) {
  const std::size_t digits = text.find_first_not_of("+-");
  return digits != std::string::npos && text.size() - digits > 1 && text[digits] == '0';
}

// The alternatives of one group's body: "a,b,c" or "A..B".
std::vector<std::string> alternatives(const std::string& body, const std::string& pattern) {
  const auto dots = body.find("..");
  if (dots != std::string::npos && body.find(',') == std::string::npos) {
    const std::string first = body.substr(0, dots);
    const std::string last = body.substr(dots + 2);
    long long a = 0;
    long long b = 0;
    PW_INPUT_CHECK(parse_integer(first, a) && parse_integer(last, b),
                   "brace range '{" << body << "}' in '" << pattern << "' is not two integers (e.g. {000000..000031})");
    // |b - a| formed in unsigned arithmetic: it cannot overflow for any two long longs.
    const unsigned long long span = a <= b ? static_cast<unsigned long long>(b) - static_cast<unsigned long long>(a)
                                           : static_cast<unsigned long long>(a) - static_cast<unsigned long long>(b);
    PW_INPUT_CHECK(span < static_cast<unsigned long long>(kMaxBraceNames), "brace range '{" << body << "}' in '" << pattern
                   << "' is too long; a pattern names at most " << kMaxBraceNames << " shards");
    const int width = zero_padded(first) || zero_padded(last) ? static_cast<int>(std::max(first.size(), last.size())) : 0;
    std::vector<std::string> out;
    const long long step = a <= b ? 1 : -1;
    for (long long v = a;; v += step) {
      char text[32];
      std::snprintf(text, sizeof text, "%0*lld", width, v);
      out.emplace_back(text);
      if (v == b) break;
    }
    return out;
  }
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto comma = body.find(',', start);
    out.push_back(body.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

bool has_braces(const std::string& pattern) { return pattern.find_first_of("{}") != std::string::npos; }

std::vector<std::string> expand_braces(const std::string& pattern) {
  std::vector<std::string> results{""};
  std::size_t pos = 0;
  while (pos < pattern.size()) {
    const auto open = pattern.find_first_of("{}", pos);
    const std::string literal = pattern.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    for (auto& r : results) r += literal;
    if (open == std::string::npos) break;
    PW_INPUT_CHECK(pattern[open] == '{', "unmatched '}' in the pattern '" << pattern << "'");
    const auto close = pattern.find_first_of("{}", open + 1);
    PW_INPUT_CHECK(close != std::string::npos && pattern[close] == '}',
                   (close == std::string::npos ? "unmatched '{'" : "nested braces") << " in the pattern '" << pattern << "'");
    const std::string body = pattern.substr(open + 1, close - open - 1);
    PW_INPUT_CHECK(!body.empty(), "empty braces in the pattern '" << pattern << "'");
    const std::vector<std::string> alts = alternatives(body, pattern);
    // Several groups multiply: {0..9999}{0..9999} is 10^8 names. Held to the same bound.
    PW_INPUT_CHECK(results.size() <= static_cast<std::size_t>(kMaxBraceNames) / alts.size(),
                   "the pattern '" << pattern << "' names more than " << kMaxBraceNames << " shards");
    std::vector<std::string> grown;
    for (const auto& r : results)
      for (const auto& alt : alts) grown.push_back(r + alt);
    results = std::move(grown);
    pos = close + 1;
  }
  return results;
}

}  // namespace pw::models::data::shards
