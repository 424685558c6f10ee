#include "core/json_text.h"

#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/units.h"

namespace pw {

namespace {

// How deep lists and objects nest in `text`, outside strings (a backslash escapes the next byte
// inside one); stops counting once past `limit`.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > deepest) deepest = depth;
        if (deepest > limit) return deepest;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;   // an unmatched closer is the parser's to name
        break;
      default: break;
    }
  }
  return deepest;
}

}  // namespace

void check_json_depth(std::string_view text, std::string_view what, int max_depth) {
  if (nesting_depth(text, max_depth) > max_depth)
    throw InputError(std::string(what) + ": JSON nested deeper than " + std::to_string(max_depth) +
                     " levels; accepted are lists and objects nested at most " + std::to_string(max_depth) + " deep");
}

nlohmann::json parse_json_text(std::string_view text, std::string_view what, int max_depth) {
  check_json_depth(text, what, max_depth);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string(what) + ": not JSON (" + e.what() + ")");
  }
}

nlohmann::json read_json_file(const std::string& path, std::string_view what, std::int64_t max_bytes, int max_depth) {
  return parse_json_text(read_whole(path, what, max_bytes), std::string(what) + " " + path, max_depth);
}

}  // namespace pw
