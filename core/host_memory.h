#pragma once
// This machine's physical memory, for checks that refuse a job before it allocates more than the
// host could ever give (Linux overcommits, so a huge allocation "succeeds" and fails later).
#include <cstdint>

namespace pw {

std::int64_t host_memory_bytes();            // total physical memory; 0 when the OS does not say
std::int64_t host_available_memory_bytes();  // what could be allocated now without swapping; 0 when unknown

}  // namespace pw
