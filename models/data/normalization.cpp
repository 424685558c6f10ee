#include "models/data/normalization.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <vector>

#include "core/error.h"

namespace pw::models::data {
namespace {

constexpr const char* kAccepted =
    "expected MEAN,...:STD,... with one value a side (every channel) or three (R, G, B) and every std > 0, "
    "e.g. 0.485,0.456,0.406:0.229,0.224,0.225";

// The comma-separated numbers of `text`, or nullopt when one of them is not a number.
std::optional<std::vector<float>> numbers(const std::string& text) {
  std::vector<float> out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t end = std::min(text.find(',', pos), text.size());
    float value = 0;
    const char* first = text.data() + pos;
    const char* last = text.data() + end;
    const auto [ptr, ec] = std::from_chars(first, last, value);
    if (first == last || ec != std::errc() || ptr != last) return std::nullopt;
    out.push_back(value);
    if (end == text.size()) return out;
    pos = end + 1;
  }
}

std::array<float, 3> channels(const std::vector<float>& values) {
  if (values.size() == 1) return {values[0], values[0], values[0]};
  return {values[0], values[1], values[2]};
}

std::string side_text(const std::array<float, 3>& v) {
  std::string out;
  const int count = v[0] == v[1] && v[1] == v[2] ? 1 : 3;
  for (int c = 0; c < count; ++c) {
    char buffer[32];
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v[static_cast<std::size_t>(c)]);
    out += (c ? "," : "") + std::string(buffer, end);
  }
  return out;
}

}  // namespace

Normalization parse_normalization(const std::string& text) {
  const std::size_t colon = text.find(':');
  PW_INPUT_CHECK(colon != std::string::npos && text.find(':', colon + 1) == std::string::npos,
                 "'" << text << "' is not a normalisation: it needs one ':' between the means and the stds; " << kAccepted);
  const auto means = numbers(text.substr(0, colon));
  const auto stds = numbers(text.substr(colon + 1));
  PW_INPUT_CHECK(means && stds, "'" << text << "' is not a normalisation: a value is not a number; " << kAccepted);
  for (const auto* side : {&*means, &*stds})
    PW_INPUT_CHECK(side->size() == 1 || side->size() == 3, "'" << text << "' is not a normalisation: "
                                                               << side->size() << " values a side; " << kAccepted);
  const Normalization n{channels(*means), channels(*stds)};
  try {
    check_normalization(n);
  } catch (const InputError& e) {
    throw InputError("'" + text + "' is not a normalisation: " + e.what());
  }
  return n;
}

std::string normalization_text(const Normalization& n) { return side_text(n.mean) + ":" + side_text(n.std); }

void check_normalization(const Normalization& n) {
  for (int c = 0; c < 3; ++c) {
    const auto i = static_cast<std::size_t>(c);
    PW_INPUT_CHECK(std::isfinite(n.mean[i]), "mean " << n.mean[i] << " of channel " << c << "; " << kAccepted);
    PW_INPUT_CHECK(std::isfinite(n.std[i]) && n.std[i] > 0, "std " << n.std[i] << " of channel " << c << "; " << kAccepted);
  }
}

}  // namespace pw::models::data
