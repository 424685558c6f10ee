// Telling a machine without a GPU from one whose CUDA is broken: GPU suites skip only on the first.
// Runs everywhere (no GPU needed): the classification works on the raw facts.
#include <boost/test/unit_test.hpp>

#include "kernels/cuda_probe.h"

namespace pk = pw::kernels;
using pk::CudaPresence;

BOOST_AUTO_TEST_SUITE(cuda_probe)

BOOST_AUTO_TEST_CASE(devices_found_are_present) {
  const auto p = pk::classify_cuda_probe(0, "cudaSuccess", "no error", 2, 13000, 13000, true);
  BOOST_TEST((p.presence == CudaPresence::Present));
  BOOST_TEST(p.devices == 2);
  BOOST_TEST(p.detail.empty());
}

BOOST_AUTO_TEST_CASE(no_device_and_no_driver_are_skips) {
  const auto none = pk::classify_cuda_probe(100, "cudaErrorNoDevice", "no CUDA-capable device is detected", 0, 13000,
                                            13000, true);
  BOOST_TEST((none.presence == CudaPresence::NoDevice));
  BOOST_TEST(none.devices == 0);
  BOOST_TEST(none.detail.find("cudaErrorNoDevice") != std::string::npos);
  // A machine with no NVIDIA driver at all: the runtime finds no libcuda (driver version 0).
  const auto bare = pk::classify_cuda_probe(35, "cudaErrorInsufficientDriver", "driver insufficient", -1, 0, 13000,
                                            false);
  BOOST_TEST((bare.presence == CudaPresence::NoDriver));
  BOOST_TEST(bare.devices == 0);
}

BOOST_AUTO_TEST_CASE(a_driver_that_fails_is_broken_not_absent) {
  // The kernel driver is there but the user-space library is missing or too old.
  const auto node = pk::classify_cuda_probe(35, "cudaErrorInsufficientDriver", "driver insufficient", 0, 0, 13000, true);
  BOOST_TEST((node.presence == CudaPresence::Broken));
  const auto old = pk::classify_cuda_probe(35, "cudaErrorInsufficientDriver", "driver insufficient", 0, 12020, 13000,
                                           false);
  BOOST_TEST((old.presence == CudaPresence::Broken));
  BOOST_TEST(old.detail.find("driver 12020, runtime 13000") != std::string::npos, old.detail);
  const auto fault = pk::classify_cuda_probe(999, "cudaErrorUnknown", "unknown error", 0, 13000, 13000, true);
  BOOST_TEST((fault.presence == CudaPresence::Broken));
  BOOST_TEST(fault.detail.find("cudaErrorUnknown") != std::string::npos, fault.detail);
}

BOOST_AUTO_TEST_CASE(this_machine_is_not_broken) {
  // CI machines have no GPU (no driver or no device); GPU machines have a working one. A broken
  // installation fails here and names the CUDA error.
  const auto& p = pk::probe_cuda();
  BOOST_TEST((p.presence != CudaPresence::Broken), p.detail);
  BOOST_TEST_MESSAGE("CUDA here: " << pk::cuda_presence_name(p.presence) << " (" << p.devices << " devices) "
                                   << p.detail);
  if (p.presence != CudaPresence::Present) BOOST_TEST(pk::cuda_device_count() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
