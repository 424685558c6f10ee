#pragma once
// Exceptions with context and the check macros every pipewright library uses.
#include <sstream>
#include <stdexcept>
#include <string>

#include "pipewright/error.h"   // Error, InputError and the other public exception types

namespace pw {

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const char* expr, const std::string& msg);
}  // namespace detail

}  // namespace pw

#define PW_DETAIL_MSG(stream_expr) \
  (static_cast<std::ostringstream&&>(std::ostringstream() << stream_expr)).str()

// PW_CHECK(cond, "message " << value): throws pw::Error naming file:line and the expression.
#define PW_CHECK(cond, ...)                                                                 \
  do {                                                                                      \
    if (!(cond)) ::pw::detail::throw_error(__FILE__, __LINE__, #cond, PW_DETAIL_MSG("" __VA_OPT__(<<) __VA_ARGS__)); \
  } while (0)

#define PW_FAIL(...) ::pw::detail::throw_error(__FILE__, __LINE__, nullptr, PW_DETAIL_MSG("" __VA_OPT__(<<) __VA_ARGS__))

// PW_INPUT_CHECK(cond, "what was wrong; what is accepted"): throws pw::InputError with that one line.
#define PW_INPUT_CHECK(cond, ...)                                         \
  do {                                                                    \
    if (!(cond)) throw ::pw::InputError(PW_DETAIL_MSG("" __VA_OPT__(<<) __VA_ARGS__));   \
  } while (0)
