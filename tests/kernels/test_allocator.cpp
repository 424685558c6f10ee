// The caching allocator: reuse, caps, and the OutOfMemory message.
#include <boost/test/unit_test.hpp>

#include "core/units.h"
#include "kernels/runtime.h"
#include "kernels/tensor.h"

using namespace pw;
using namespace pw::kernels;

BOOST_AUTO_TEST_SUITE(allocator)

BOOST_AUTO_TEST_CASE(freed_blocks_are_reused) {
  auto& alloc = DeviceRuntime::get(Device::cpu(11)).allocator();
  { Tensor t = Tensor::empty({1024}, DType::F32, Device::cpu(11)); }
  const auto reserved = alloc.stats().reserved;
  for (int i = 0; i < 10; ++i) Tensor t = Tensor::empty({1000}, DType::F32, Device::cpu(11));
  BOOST_CHECK_EQUAL(alloc.stats().reserved, reserved);
  BOOST_CHECK_EQUAL(alloc.stats().in_use, 0);
  BOOST_CHECK_GE(alloc.stats().peak_in_use, 4000);
}

BOOST_AUTO_TEST_CASE(a_reserved_block_is_cached_not_in_use_and_the_next_allocation_takes_it) {
  const Device dev = Device::cpu(13);
  auto& alloc = DeviceRuntime::get(dev).allocator();
  const std::size_t bytes = std::size_t{3} << 20;
  const auto block = static_cast<std::int64_t>(CachingAllocator::round_size(bytes));
  BOOST_TEST(alloc.reserve(bytes));
  BOOST_TEST(alloc.stats().reserved == block);
  BOOST_TEST(alloc.stats().in_use == 0);
  BOOST_TEST(alloc.stats().peak_in_use == 0);
  BOOST_TEST(alloc.reserve(bytes));   // one is cached already: nothing more
  BOOST_TEST(alloc.stats().reserved == block);
  {
    Tensor t = Tensor::empty({static_cast<std::int64_t>(bytes / 4)}, DType::F32, dev);
    BOOST_TEST(alloc.stats().reserved == block);   // the reserved block, not a new one
    BOOST_TEST(alloc.stats().in_use == block);
  }
  // Over the cap it declines and maps nothing.
  DeviceRuntime::get(dev).set_memory_cap(block + (1 << 20));
  Tensor held = Tensor::empty({static_cast<std::int64_t>(bytes / 4)}, DType::F32, dev);
  BOOST_TEST(!alloc.reserve(bytes));
  BOOST_TEST(alloc.stats().reserved == block);
  DeviceRuntime::get(dev).set_memory_cap(0);
}

BOOST_AUTO_TEST_CASE(cap_throws_out_of_memory_naming_device_and_bytes) {
  const Device dev = Device::cpu(12);
  auto& rt = DeviceRuntime::get(dev);
  rt.set_memory_cap(1 << 20);
  Tensor held = Tensor::empty({128 * 1024}, DType::F32, dev);   // 512 KiB
  try {
    Tensor big = Tensor::empty({256 * 1024}, DType::F32, dev);   // 1 MiB more
    BOOST_FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    BOOST_CHECK_MESSAGE(msg.find("out of memory on cpu:12: asked for 1.00 MiB (1048576 bytes), 512.00 KiB (524288 bytes) free") !=
                            std::string::npos, msg);
    BOOST_CHECK_EQUAL(e.requested, 1048576);
    BOOST_CHECK_EQUAL(e.free_bytes, 524288);
  }
  // Cached blocks are released to make room before giving up.
  held = Tensor();
  Tensor fits = Tensor::empty({200 * 1024}, DType::F32, dev);
  BOOST_CHECK(fits.defined());
  rt.set_memory_cap(0);
}

BOOST_AUTO_TEST_CASE(logical_cpu_devices_keep_their_own_caps_and_threads) {
  DeviceRuntime::get(Device::cpu(13)).set_memory_cap(4096);
  BOOST_CHECK_THROW(Tensor::empty({4096}, DType::F32, Device::cpu(13)), OutOfMemory);
  BOOST_CHECK_NO_THROW(Tensor::empty({4096}, DType::F32, Device::cpu(14)));
  DeviceRuntime::get(Device::cpu(13)).set_threads(1);
  DeviceRuntime::get(Device::cpu(14)).set_threads(2);
  BOOST_CHECK_EQUAL(DeviceRuntime::get(Device::cpu(13)).threads(), 1);
  BOOST_CHECK_EQUAL(DeviceRuntime::get(Device::cpu(14)).threads(), 2);
  BOOST_CHECK_THROW(DeviceRuntime::get(Device::cpu(14)).set_threads(0), InputError);
  DeviceRuntime::get(Device::cpu(13)).set_memory_cap(0);
}

// Blocks count under the kind of the scope that allocated them, can be re-counted, and the peak
// keeps what was held at the moment it was reached.
BOOST_AUTO_TEST_CASE(memory_is_counted_by_kind_and_the_peak_keeps_its_breakdown) {
  const Device dev = Device::cpu(15);
  auto& alloc = DeviceRuntime::get(dev).allocator();
  alloc.release_cache();
  alloc.reset_peak();
  const auto kind = [&](MemoryKind k, bool at_peak) {
    const auto stats = alloc.stats();
    return (at_peak ? stats.peak_by_kind : stats.in_use_by_kind)[static_cast<std::size_t>(k)];
  };
  Tensor weights;
  {
    MemoryKindScope scope(MemoryKind::Parameters);
    weights = Tensor::empty({1024}, DType::F32, dev);   // 4 KiB
  }
  Tensor state;
  {
    MemoryKindScope outer(MemoryKind::Activations);
    MemoryKindScope inner(MemoryKind::OptimizerState);
    state = Tensor::empty({2048}, DType::F32, dev);   // 8 KiB
  }
  Tensor scratch = Tensor::empty({512}, DType::F32, dev);   // no scope: workspace
  BOOST_TEST(kind(MemoryKind::Parameters, false) == 4096);
  BOOST_TEST(kind(MemoryKind::OptimizerState, false) == 8192);
  BOOST_TEST(kind(MemoryKind::Workspace, false) == 2048);
  set_memory_kind(weights, MemoryKind::MasterWeights);
  BOOST_TEST(kind(MemoryKind::Parameters, false) == 0);
  BOOST_TEST(kind(MemoryKind::MasterWeights, false) == 4096);
  // The peak (14 KiB) was reached with the weights still counted as parameters.
  BOOST_TEST(alloc.stats().peak_in_use == 14336);
  BOOST_TEST(kind(MemoryKind::Parameters, true) == 4096);
  state = Tensor();
  scratch = Tensor();
  BOOST_TEST(kind(MemoryKind::OptimizerState, false) == 0);
  BOOST_TEST(kind(MemoryKind::OptimizerState, true) == 8192);
  {
    MemoryKindScope scope(MemoryKind::Communication);
    state = Tensor::empty({2048}, DType::F32, dev);   // a cached block, counted anew under its new kind
  }
  BOOST_TEST(kind(MemoryKind::Communication, false) == 8192);
  BOOST_TEST(std::string(memory_kind_name(MemoryKind::MasterWeights)) == "master_weights");
}

BOOST_AUTO_TEST_CASE(byte_sizes_parse_and_reject_nonsense) {
  BOOST_CHECK_EQUAL(parse_bytes("512MiB"), 512LL << 20);
  BOOST_CHECK_EQUAL(parse_bytes("2GiB"), 2LL << 30);
  BOOST_CHECK_EQUAL(parse_bytes("1.5GB"), 1500000000LL);
  BOOST_CHECK_EQUAL(parse_bytes("4096"), 4096);
  BOOST_CHECK_THROW(parse_bytes("lots"), InputError);
  BOOST_CHECK_THROW(parse_bytes("12 parsecs"), InputError);
  BOOST_CHECK_THROW(parse_bytes("-1MiB"), InputError);
  BOOST_CHECK_THROW(Device::parse("gpu:0"), InputError);
  BOOST_CHECK(Device::parse("cuda:3") == Device::cuda(3));
}

BOOST_AUTO_TEST_SUITE_END()
