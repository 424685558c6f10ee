#include "core/host_memory.h"

#include <unistd.h>

namespace pw {
namespace {
std::int64_t pages_to_bytes(long pages) {
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::int64_t>(pages) * page;
}
}  // namespace

std::int64_t host_memory_bytes() { return pages_to_bytes(sysconf(_SC_PHYS_PAGES)); }
std::int64_t host_available_memory_bytes() { return pages_to_bytes(sysconf(_SC_AVPHYS_PAGES)); }

}  // namespace pw
