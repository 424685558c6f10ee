#include "core/host_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <new>

namespace pw {

namespace {

// False where the kernel could not give the pages (out of memory): the caller unmaps and throws
// bad_alloc, rather than touching pages until the OOM killer or SIGBUS decides.
bool populate_now(void* block, std::size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  int result = 0;
  do result = ::madvise(block, bytes, MADV_POPULATE_WRITE);
  while (result != 0 && errno == EINTR);
  if (result == 0) return true;
  if (errno != EINVAL) return false;   // EINVAL: a kernel before 5.14, which lacks the flag
#endif
  // Older kernels: write one byte per small page (a huge page takes its first write only).
  auto* p = static_cast<volatile char*>(block);
  for (std::size_t i = 0; i < bytes; i += 4096) p[i] = 0;
  return true;
}

}  // namespace

void* map_host_pages(std::size_t bytes) {
  if (bytes < kHugePageBytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    if (!populate_now(p, bytes)) {
      ::munmap(p, bytes);
      throw std::bad_alloc();
    }
    return p;
  }
  // Over-map by one huge page and trim, so the block starts on a 2 MiB boundary.
  const std::size_t padded = bytes + kHugePageBytes;
  void* raw = ::mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePageBytes - 1) & ~(std::uintptr_t{kHugePageBytes} - 1);
  const std::size_t head = aligned - start;
  const std::size_t tail = padded - head - bytes;
  if (head > 0) ::munmap(raw, head);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  void* block = reinterpret_cast<void*>(aligned);
  ::madvise(block, bytes, MADV_HUGEPAGE);   // a hint: refused where THP is off, and the block still works
  if (!populate_now(block, bytes)) {
    ::munmap(block, bytes);
    throw std::bad_alloc();
  }
  return block;
}

void unmap_host_pages(void* block, std::size_t bytes) noexcept {
  if (block != nullptr) ::munmap(block, bytes);
}

}  // namespace pw
