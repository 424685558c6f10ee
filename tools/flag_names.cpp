#include "tools/flag_names.h"

#include <cctype>

namespace pw::tools {
namespace {

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Where the field path that starts at text[at] ends when it is `path` or an element of it
// ("/resources/devices/2"); npos when it is not.
std::size_t end_of(const std::string& text, std::size_t at, const std::string& path) {
  if (text.compare(at, path.size(), path) != 0) return std::string::npos;
  std::size_t end = at + path.size();
  while (end + 1 < text.size() && text[end] == '/' && std::isdigit(static_cast<unsigned char>(text[end + 1]))) {
    ++end;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  }
  if (end < text.size() && (is_name_char(text[end]) || text[end] == '/')) return std::string::npos;
  return end;
}

}  // namespace

std::string FlagNames::flag_of(const std::string& path) const {
  for (const auto& [field, flag] : entries_)
    if (end_of(path, 0, field) == path.size()) return flag;
  return {};
}

std::string FlagNames::translate(const std::string& text) const {
  std::string out;
  std::size_t at = 0;
  while (at < text.size()) {
    // A path starts a word: not inside a file name such as /tmp/run/data/steps.
    const bool word_start = at == 0 || !(is_name_char(text[at - 1]) || text[at - 1] == '/' || text[at - 1] == '.' ||
                                         text[at - 1] == '-');
    std::size_t best_end = std::string::npos;
    const std::string* best_flag = nullptr;
    if (text[at] == '/' && word_start) {
      for (const auto& [field, flag] : entries_) {
        const auto end = end_of(text, at, field);
        if (end != std::string::npos && (best_flag == nullptr || end > best_end)) {
          best_end = end;
          best_flag = &flag;
        }
      }
    }
    if (best_flag != nullptr) {
      out += *best_flag;
      at = best_end;
    } else {
      out += text[at++];
    }
  }
  return out;
}

std::string FlagNames::message_of(const train::ConfigError& error) const {
  const auto flag = flag_of(error.path());
  return (flag.empty() ? error.path() : flag) + ": " + translate(error.problem());
}

}  // namespace pw::tools
