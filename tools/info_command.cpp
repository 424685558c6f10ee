#include "tools/info_command.h"

#include <cstdio>
#include <thread>

#include <boost/version.hpp>
#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/tbb/version.h>
#include <thrift/config.h>

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
    std::printf("oneTBB:       %s\n", TBB_runtime_version());
    std::printf("Thrift:       %s\n", PACKAGE_VERSION);
    std::printf("Boost:        %d.%d.%d\n", BOOST_VERSION / 100000, BOOST_VERSION / 100 % 1000, BOOST_VERSION % 100);
#ifdef PW_WITH_CUDA
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    int nccl = 0;
    ncclGetVersion(&nccl);
    std::printf("CUDA runtime: %d.%d\n", runtime / 1000, runtime % 1000 / 10);
    std::printf("cuDNN:        %zu\n", cudnnGetVersion());
    std::printf("NCCL:         %d\n", nccl);
    std::printf("CUDA devices: %d\n", kernels::cuda_device_count());
#else
    std::printf("CUDA:         not built (PW_WITH_CUDA=OFF)\n");
#endif
    std::exit(0);
  });
}

}  // namespace pw::tools
