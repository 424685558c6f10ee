#include "kernels/ops/half_support.h"

#include <oneapi/dnnl/dnnl.hpp>

#ifdef PW_WITH_CUDA
#include "kernels/cuda/ops.h"
#endif

namespace pw::kernels {

namespace {

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::sse41: return "sse41";
    default: return "other";
  }
}

bool cpu_native(DType dtype, HalfOp op) {
  if (op == HalfOp::Elementwise || op == HalfOp::AdaptivePool || op == HalfOp::BatchNormTrain)
    return true;   // own loops, any dtype
  // oneDNN 2.6 has f16 convolution, matmul and pooling kernels only for AVX512_FP16 CPUs (and a
  // reference path that is far slower than converting): F16 goes through F32 on this backend.
  if (dtype == DType::F16) return false;
  return cpu_bf16_support() != CpuBf16::ViaF32;
}

}  // namespace

CpuBf16 cpu_bf16_support() {
  static const CpuBf16 support = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto has = [isa](dnnl::cpu_isa want) {
      const auto bits = static_cast<unsigned>(want);
      return (isa & bits) == bits;
    };
    if (has(dnnl::cpu_isa::avx512_core_bf16)) return CpuBf16::Native;
    if (has(dnnl::cpu_isa::avx512_core)) return CpuBf16::Emulated;
    return CpuBf16::ViaF32;
  }();
  return support;
}

std::string cpu_bf16_description() {
  const std::string isa = isa_name(dnnl::get_effective_cpu_isa());
  switch (cpu_bf16_support()) {
    case CpuBf16::Native: return "native (oneDNN ISA " + isa + ")";
    case CpuBf16::Emulated: return "emulated on AVX-512, no AVX512_BF16 or AMX (oneDNN ISA " + isa + "; slower)";
    case CpuBf16::ViaF32: return "via F32, no AVX-512 (oneDNN ISA " + isa + "; bf16 storage, f32 compute, slower)";
  }
  return isa;
}

bool runs_natively(Device device, DType dtype, HalfOp op) {
  if (!is_half(dtype)) return true;
  if (device.is_cuda()) {
#ifdef PW_WITH_CUDA
    return cuda::native_half(dtype, op);
#else
    return false;   // no CUDA backend: the op fails at dispatch either way
#endif
  }
  return cpu_native(dtype, op);
}

}  // namespace pw::kernels
