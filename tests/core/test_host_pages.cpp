// Large host blocks: 2 MiB-aligned, zeroed, writable, and marked for transparent huge pages (the
// kernel lists the mark as "hg" in the block's VmFlags, whether or not it had huge pages to give);
// small blocks are plain pages; the CPU allocator takes large tensors from them.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/host_pages.h"
#include "kernels/tensor.h"

using namespace pw;

namespace {

// The VmFlags line of the mapping that contains `address`, from /proc/self/smaps.
std::string vm_flags_of(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= at && at < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool has_flag(const std::string& flags, const std::string& flag) {
  std::istringstream words(flags);
  std::string w;
  while (words >> w)
    if (w == flag) return true;
  return false;
}

// Pages of [p, p + bytes) the kernel reports resident (mincore).
std::size_t resident_pages(const void* p, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((bytes + page - 1) / page);
  BOOST_REQUIRE(::mincore(const_cast<void*>(p), bytes, in_core.data()) == 0);
  std::size_t n = 0;
  for (unsigned char c : in_core) n += c & 1;
  return n;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(host_pages)

BOOST_AUTO_TEST_CASE(a_large_block_is_aligned_zeroed_resident_and_asks_for_huge_pages) {
  const std::size_t bytes = 5 * kHugePageBytes + 4096;
  auto* p = static_cast<unsigned char*>(map_host_pages(bytes));
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  BOOST_TEST(resident_pages(p, bytes) == (bytes + page - 1) / page);   // before anything wrote it
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(p) % kHugePageBytes == 0u);
  BOOST_TEST(p[0] == 0);
  BOOST_TEST(p[bytes - 1] == 0);
  std::memset(p, 7, bytes);
  BOOST_TEST(p[bytes / 2] == 7);
  const auto flags = vm_flags_of(p);
  BOOST_TEST(has_flag(flags, "hg"), flags);
  unmap_host_pages(p, bytes);
}

BOOST_AUTO_TEST_CASE(a_small_block_is_plain_resident_pages) {
  auto* p = static_cast<unsigned char*>(map_host_pages(64 * 1024));
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  BOOST_TEST(resident_pages(p, 64 * 1024) == 64 * 1024 / page);
  BOOST_TEST(p[100] == 0);
  p[100] = 1;
  BOOST_TEST(!has_flag(vm_flags_of(p), "hg"));
  unmap_host_pages(p, 64 * 1024);
}

BOOST_AUTO_TEST_CASE(large_cpu_tensors_come_from_huge_page_blocks) {
  const auto t = kernels::Tensor::zeros({3 << 20}, kernels::DType::F32, kernels::Device::cpu(0));   // 12 MiB
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(t.raw()) % kHugePageBytes == 0u);
  BOOST_TEST(has_flag(vm_flags_of(t.raw()), "hg"));
}

// A socket receive into a block that faults inside the kernel's copy stalled whole connections
// (see CachingAllocator::raw_allocate): a large CPU tensor is resident before anything writes it.
BOOST_AUTO_TEST_CASE(a_fresh_large_cpu_tensor_is_resident_before_it_is_written) {
  const std::size_t bytes = std::size_t{40} << 20;   // larger than any block this suite freed
  const auto t = kernels::Tensor::empty({static_cast<std::int64_t>(bytes / 4)}, kernels::DType::F32,
                                        kernels::Device::cpu(0));
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  BOOST_TEST(resident_pages(t.raw(), bytes) == bytes / page);
}

BOOST_AUTO_TEST_SUITE_END()
