# Finds every external dependency once and exposes it as an imported target.
find_package(Threads REQUIRED)
find_package(TBB REQUIRED)                       # TBB::tbb
find_package(ZLIB REQUIRED)                      # ZLIB::ZLIB (gzip-compressed data sets)
find_package(OpenSSL REQUIRED)                   # OpenSSL::SSL, OpenSSL::Crypto (TLS links, rpc/tls.h)
# Debian's dnnl-config.cmake insists on OpenCL (its GPU runtime); we use only the CPU engine.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp REQUIRED)
find_library(DNNL_LIBRARY dnnl REQUIRED)
add_library(pw_dnnl INTERFACE)
target_include_directories(pw_dnnl INTERFACE ${DNNL_INCLUDE_DIR})
target_link_libraries(pw_dnnl INTERFACE ${DNNL_LIBRARY})
find_package(nlohmann_json REQUIRED)             # nlohmann_json::nlohmann_json
find_package(CLI11 REQUIRED)                     # CLI11::CLI11
find_package(Boost REQUIRED COMPONENTS unit_test_framework)
find_package(Protobuf REQUIRED)                  # protobuf::libprotobuf-lite, protobuf_generate (TensorBoard events)

find_package(PkgConfig REQUIRED)
pkg_check_modules(THRIFT REQUIRED IMPORTED_TARGET thrift)   # PkgConfig::THRIFT
pkg_check_modules(LIBARCHIVE REQUIRED IMPORTED_TARGET libarchive)   # PkgConfig::LIBARCHIVE (tar shards)
pkg_check_modules(TURBOJPEG REQUIRED IMPORTED_TARGET libturbojpeg)   # PkgConfig::TURBOJPEG (JPEG decoding)
pkg_check_modules(PNG REQUIRED IMPORTED_TARGET libpng)               # PkgConfig::PNG
find_program(THRIFT_COMPILER thrift REQUIRED)
find_path(GLOO_INCLUDE_DIR gloo/allreduce.h REQUIRED)
find_library(GLOO_LIBRARY gloo REQUIRED)
add_library(pw_gloo INTERFACE)
target_include_directories(pw_gloo INTERFACE ${GLOO_INCLUDE_DIR})
target_link_libraries(pw_gloo INTERFACE ${GLOO_LIBRARY})

if(PW_WITH_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)               # H100 / H200
  endif()
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  enable_language(CUDA)
  # Source lines in the device code (for compute-sanitizer and ncu reports); no effect on speed.
  option(PW_CUDA_LINEINFO "Build CUDA code with -lineinfo" ON)
  if(PW_CUDA_LINEINFO)
    string(APPEND CMAKE_CUDA_FLAGS " -lineinfo")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)               # CUDA::cudart, CUDA::cublas
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  add_library(pw_cuda_deps INTERFACE)
  target_include_directories(pw_cuda_deps INTERFACE ${CUDNN_INCLUDE_DIR} ${NCCL_INCLUDE_DIR})
  target_link_libraries(pw_cuda_deps INTERFACE CUDA::cudart CUDA::cublas ${CUDNN_LIBRARY} ${NCCL_LIBRARY})
  target_compile_definitions(pw_cuda_deps INTERFACE PW_WITH_CUDA=1)
  message(STATUS "pipewright: CUDA path ON (archs ${CMAKE_CUDA_ARCHITECTURES}), cuDNN ${CUDNN_LIBRARY}, NCCL ${NCCL_LIBRARY}")
else()
  message(STATUS "pipewright: CUDA path OFF (CPU-only build)")
endif()
