#pragma once
// JSON from user files (configs, manifests, checkpoint headers, traces), parsed only after its
// nesting depth is known to be bounded: nlohmann's dump(), copies and comparisons recurse, so a
// 100,000-deep array would overflow the stack long after the parse succeeded.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace pw {

inline constexpr int kMaxJsonDepth = 64;

// Throws the InputError of parse_json_text when lists and objects in `text` (outside strings)
// nest deeper than `max_depth`; for a caller that parses `text` itself and names its errors.
void check_json_depth(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth);

// `text` parsed as JSON. Throws InputError "<what>: JSON nested deeper than <max_depth> levels; ..."
// when lists and objects (outside strings) nest deeper than `max_depth`, and "<what>: not JSON (...)"
// for a syntax error. `what` names the source in messages, e.g. "--config job.json".
nlohmann::json parse_json_text(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth);

// The file at `path`, read whole (core/input_file.h: a FIFO, device or folder refused without
// blocking, a file over `max_bytes` before it is read) and parsed with parse_json_text; messages
// name it as "<what> <path>" (what: "--config", "checkpoint manifest").
nlohmann::json read_json_file(const std::string& path, std::string_view what,
                              std::int64_t max_bytes = std::int64_t{64} << 20, int max_depth = kMaxJsonDepth);

}  // namespace pw
