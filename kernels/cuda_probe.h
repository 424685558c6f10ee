#pragma once
// Whether this process can use CUDA, told apart carefully: a machine without a GPU (no driver, or
// a driver that sees no device) is not the same as a machine whose driver or libraries are broken.
// GPU test suites skip only on the first; the second is an error that names the CUDA failure.
#include <string>

namespace pw::kernels {

enum class CudaPresence {
  NotBuilt,   // built with PW_WITH_CUDA=OFF
  NoDriver,   // no NVIDIA driver here (no libcuda, no /dev/nvidiactl): not a GPU machine or container
  NoDevice,   // the driver answers and reports no device (cudaErrorNoDevice)
  Present,    // `devices` GPUs usable
  Broken,     // a driver is there but CUDA fails: wrong driver or library versions, a fault; see `detail`
};

struct CudaProbe {
  CudaPresence presence = CudaPresence::NotBuilt;
  int devices = 0;
  int driver_version = 0;    // e.g. 13000 (0: no driver)
  int runtime_version = 0;   // e.g. 13000
  std::string detail;        // the CUDA error behind NoDevice / Broken, or empty
};

// What cudaGetDeviceCount's result means, from the raw facts (kept apart so it can be tested on any
// machine): `error` is its cudaError_t as an int, `error_name` its name, `driver_node_present` whether
// /dev/nvidiactl exists.
CudaProbe classify_cuda_probe(int error, const std::string& error_name, const std::string& error_text, int devices,
                              int driver_version, int runtime_version, bool driver_node_present);

// Probes once per process (cached).
const CudaProbe& probe_cuda();
const char* cuda_presence_name(CudaPresence p);

// Usable GPUs: 0 without CUDA or without a device; throws Error (with the CUDA failure) when Broken.
int cuda_device_count();

// A physical GPU's identity ("GPU-1b2c..." from its UUID), the same in every process on a host
// whatever CUDA_VISIBLE_DEVICES says; for telling whether two ranks share one GPU.
std::string cuda_device_uuid(int index);
// "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB, GPU-1b2c..." for `pipewright info`.
std::string cuda_device_summary(int index);

}  // namespace pw::kernels
