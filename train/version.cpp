#include "pipewright/version.h"

namespace pw {
const char* version() { return PIPEWRIGHT_VERSION_STRING; }
}  // namespace pw
