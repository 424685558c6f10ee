#pragma once
// Comparing secrets (job tokens) in time independent of where they differ, so that a token cannot
// be guessed byte by byte from how fast a wrong one is refused.
#include <cstddef>
#include <string_view>

namespace pw {

inline bool secrets_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]));
  return diff == 0;
}

}  // namespace pw
