#include "core/error.h"

namespace pw::detail {

void throw_error(const char* file, int line, const char* expr, const std::string& msg) {
  std::ostringstream out;
  out << msg;
  out << " [" << file << ":" << line;
  if (expr != nullptr) out << ", check failed: " << expr;
  out << "]";
  throw Error(out.str());
}

}  // namespace pw::detail
