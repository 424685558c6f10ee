#include "tools/info_command.h"

#include <cstdio>
#include <thread>

#include <boost/version.hpp>
#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/tbb/version.h>
#include <thrift/config.h>

#include "kernels/cuda_probe.h"
#include "kernels/ops/half_support.h"
#include "kernels/stream.h"

#ifdef PW_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>
#endif

namespace pw::tools {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "print the build configuration and library versions");
  cmd->callback([] {
    const dnnl_version_t* dnnl = dnnl_version();
    std::printf("pipewright 0.1.0\n");
    std::printf("cpu threads:  %u\n", std::thread::hardware_concurrency());
    std::printf("oneDNN:       %d.%d.%d\n", dnnl->major, dnnl->minor, dnnl->patch);
    std::printf("cpu bf16:     %s\n", kernels::cpu_bf16_description().c_str());
    std::printf("oneTBB:       %s\n", TBB_runtime_version());
    std::printf("Thrift:       %s\n", PACKAGE_VERSION);
    std::printf("Boost:        %d.%d.%d\n", BOOST_VERSION / 100000, BOOST_VERSION / 100 % 1000, BOOST_VERSION % 100);
#ifdef PW_WITH_CUDA
    const auto& probe = kernels::probe_cuda();
    int nccl = 0;
    ncclGetVersion(&nccl);
    int cublas[3] = {0, 0, 0};
    cublasGetProperty(MAJOR_VERSION, &cublas[0]);
    cublasGetProperty(MINOR_VERSION, &cublas[1]);
    cublasGetProperty(PATCH_LEVEL, &cublas[2]);
    std::printf("CUDA runtime: %d.%d (built with %d.%d)\n", probe.runtime_version / 1000,
                probe.runtime_version % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    std::printf("CUDA driver:  %d.%d\n", probe.driver_version / 1000, probe.driver_version % 1000 / 10);
    std::printf("cuBLAS:       %d.%d.%d\n", cublas[0], cublas[1], cublas[2]);
    std::printf("cuDNN:        %zu (built with %d)\n", cudnnGetVersion(), CUDNN_VERSION);
    std::printf("NCCL:         %d (built with %d)\n", nccl, NCCL_VERSION_CODE);
    std::printf("CUDA:         %s%s%s\n", kernels::cuda_presence_name(probe.presence), probe.detail.empty() ? "" : ": ",
                probe.detail.c_str());
    std::printf("CUDA devices: %d\n", probe.devices);
    for (int i = 0; i < probe.devices; ++i) std::printf("  cuda:%d      %s\n", i, kernels::cuda_device_summary(i).c_str());
    // A driver that is there but fails is an error for scripts that check the machine.
    std::exit(probe.presence == kernels::CudaPresence::Broken ? 1 : 0);
#else
    std::printf("CUDA:         not built (PW_WITH_CUDA=OFF)\n");
#endif
    std::exit(0);
  });
}

}  // namespace pw::tools
