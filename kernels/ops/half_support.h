#pragma once
// Which op families each backend runs natively on 16-bit floats. Where one does not (F16 on a CPU
// without oneDNN f16 kernels, BF16 on a CPU without AVX-512, any 16-bit op the CUDA backend has no
// kernel for), the op layer converts the 16-bit operands to F32, runs the F32 op and rounds the
// result back: correct, and slower. Parameters and their gradients are F32 either way.
#include <string>

#include "kernels/device.h"

namespace pw::kernels {

// Pool: max and average pooling windows (oneDNN on the CPU); AdaptivePool: adaptive average pooling
// (own loops on the CPU).
enum class HalfOp { Conv, Matmul, Pool, AdaptivePool, BatchNormTrain, BatchNormEval, Elementwise };

inline bool is_half(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16; }

// True for F32/F64 and for a 16-bit dtype the backend of `device` runs `op` in natively.
bool runs_natively(Device device, DType dtype, HalfOp op);

// How this CPU runs BF16 convolutions and matrix products (oneDNN's effective ISA, which
// ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA can lower): Native with AVX512_BF16 or AMX instructions,
// Emulated on plain AVX-512 (oneDNN converts in registers), ViaF32 below that (the op layer's
// conversion to F32).
enum class CpuBf16 { Native, Emulated, ViaF32 };
CpuBf16 cpu_bf16_support();
std::string cpu_bf16_description();   // one line: "native (avx512_core_bf16)", ...

}  // namespace pw::kernels
