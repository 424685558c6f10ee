#pragma once
// Rethrows the exception in flight with `context` in front of its message, keeping its type so
// front ends still tell bad input (exit 2), out-of-memory (exit 1), timeouts (exit 4) and another
// rank's failure (exit 5) from internal errors, and failure detection still sees a lost peer.
// Call only inside a catch block.
#include <string>

namespace pw::pipeline {

[[noreturn]] void rethrow_with_context(const std::string& context);

}  // namespace pw::pipeline
