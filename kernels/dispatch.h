#pragma once
// Routes an op to its CPU implementation (run inside the device's thread arena) or its CUDA one.
#include <optional>
#include <type_traits>
#include <utility>

#include "kernels/runtime.h"

namespace pw::kernels::detail {

template <typename CpuFn, typename CudaFn>
auto dispatch(Device device, CpuFn&& cpu_fn, CudaFn&& cuda_fn) -> decltype(cpu_fn()) {
  using R = decltype(cpu_fn());
  if (device.is_cuda()) return cuda_fn();
  auto& runtime = DeviceRuntime::get(device);
  if constexpr (std::is_void_v<R>) {
    runtime.execute([&] { cpu_fn(); });
  } else {
    std::optional<R> result;
    runtime.execute([&] { result.emplace(cpu_fn()); });
    return std::move(*result);
  }
}

}  // namespace pw::kernels::detail

#ifdef PW_WITH_CUDA
#include "kernels/cuda/ops.h"
#define PW_DETAIL_CUDA_CALL(fn, ...) ::pw::kernels::cuda::fn(__VA_ARGS__)
#else
#define PW_DETAIL_CUDA_CALL(fn, ...) \
  (throw ::pw::Error("pipewright was built without CUDA (PW_WITH_CUDA=OFF): " #fn " has no CUDA path"), \
   ::pw::kernels::cpu::fn(__VA_ARGS__))
#endif
#include "kernels/cpu/ops.h"

// PW_DISPATCH(device, op_name, args...): calls cpu::op_name or cuda::op_name with the same args.
#define PW_DISPATCH(device, fn, ...)                                              \
  ::pw::kernels::detail::dispatch(                                                \
      (device), [&]() -> decltype(auto) { return ::pw::kernels::cpu::fn(__VA_ARGS__); }, \
      [&]() -> decltype(auto) { return PW_DETAIL_CUDA_CALL(fn, __VA_ARGS__); })
