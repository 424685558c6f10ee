#include "core/host_memory.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace pw {
namespace {
std::int64_t pages_to_bytes(long pages) {
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::int64_t>(pages) * page;
}
}  // namespace

std::int64_t host_memory_bytes() { return pages_to_bytes(sysconf(_SC_PHYS_PAGES)); }
// MemAvailable (what the kernel could give without swapping, reclaimable cache included); free
// pages where the kernel does not say.
std::int64_t host_available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemAvailable:", 0) == 0) return std::stoll(line.substr(13)) * 1024;   // "MemAvailable:  123 kB"
  return pages_to_bytes(sysconf(_SC_AVPHYS_PAGES));
}

}  // namespace pw
