#include "kernels/cuda_probe.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "kernels/cuda_check.h"

namespace pw::kernels {

const char* cuda_presence_name(CudaPresence p) {
  switch (p) {
    case CudaPresence::NotBuilt: return "not built";
    case CudaPresence::NoDriver: return "no driver";
    case CudaPresence::NoDevice: return "no device";
    case CudaPresence::Present: return "present";
    case CudaPresence::Broken: return "broken";
  }
  return "?";
}

CudaProbe classify_cuda_probe(int error, const std::string& error_name, const std::string& error_text, int devices,
                              int driver_version, int runtime_version, bool driver_node_present) {
  // cudaError_t values are stable ABI: 0 success, 35 cudaErrorInsufficientDriver, 100 cudaErrorNoDevice.
  constexpr int kSuccess = 0, kInsufficientDriver = 35, kNoDevice = 100;
  CudaProbe p;
  p.driver_version = driver_version;
  p.runtime_version = runtime_version;
  const std::string what = error == kSuccess ? std::string()
                                             : "cudaGetDeviceCount: " + error_name + ": " + error_text + " (driver " +
                                                   std::to_string(driver_version) + ", runtime " +
                                                   std::to_string(runtime_version) + ")";
  if (error == kSuccess) {
    p.presence = devices > 0 ? CudaPresence::Present : CudaPresence::NoDevice;
    p.devices = devices > 0 ? devices : 0;
  } else if (error == kNoDevice) {
    p.presence = CudaPresence::NoDevice;
    p.detail = what;
  } else if (error == kInsufficientDriver && driver_version == 0 && !driver_node_present) {
    // The runtime found no libcuda at all and the kernel has no NVIDIA driver: a machine without GPUs.
    p.presence = CudaPresence::NoDriver;
    p.detail = what;
  } else {
    p.presence = CudaPresence::Broken;
    p.detail = what;
  }
  return p;
}

const CudaProbe& probe_cuda() {
  static const CudaProbe probe = [] {
#ifdef PW_WITH_CUDA
    int devices = 0, driver = 0, runtime = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    cudaGetLastError();   // a failed probe must not stay behind as the thread's last error
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
    cudaGetLastError();
    std::error_code ec;
    // The device node, not /proc/driver/nvidia: a CPU-only container on a GPU host sees the latter.
    const bool node = std::filesystem::exists("/dev/nvidiactl", ec);
    return classify_cuda_probe(static_cast<int>(err), cudaGetErrorName(err), cudaGetErrorString(err), devices, driver,
                               runtime, node);
#else
    return CudaProbe{};
#endif
  }();
  return probe;
}

int cuda_device_count() {
  const CudaProbe& p = probe_cuda();
  if (p.presence == CudaPresence::Broken)
    throw Error("CUDA is installed but does not work: " + p.detail +
                "; check the driver and that LD_LIBRARY_PATH finds matching CUDA libraries");
  return p.devices;
}

#ifdef PW_WITH_CUDA
namespace {
cudaDeviceProp properties(int index) {
  const int count = cuda_device_count();
  PW_CHECK(index >= 0 && index < count, "cuda:" << index << " does not exist (" << count << " CUDA devices)");
  cudaDeviceProp prop{};
  PW_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop;
}
}  // namespace

std::string cuda_device_uuid(int index) {
  const cudaDeviceProp prop = properties(index);
  std::string out = "GPU-";
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(prop.uuid.bytes[i]));
    out += hex;
  }
  return out;
}

std::string cuda_device_summary(int index) {
  const cudaDeviceProp prop = properties(index);
  std::ostringstream s;
  s.precision(1);
  s << prop.name << ", sm_" << prop.major << prop.minor << ", " << std::fixed
    << static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0) << " GiB, " << prop.multiProcessorCount
    << " SMs, " << cuda_device_uuid(index);
  return s.str();
}
#else
std::string cuda_device_uuid(int index) {
  throw Error("pipewright was built without CUDA; cuda:" + std::to_string(index) + " does not exist");
}
std::string cuda_device_summary(int index) { return cuda_device_uuid(index); }
#endif

}  // namespace pw::kernels
