#pragma once
// Exceptions with context and the check macros every pipewright library uses.
#include <sstream>
#include <stdexcept>
#include <string>

namespace pw {

// Internal failure: a broken invariant or a failed library call. Carries file:line and the expression.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input (flags, model specs, data files, checkpoints): the message is one line that says
// what was wrong and what is accepted. Front ends print it without a stack of context.
class InputError : public Error {
 public:
  using Error::Error;
};

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
