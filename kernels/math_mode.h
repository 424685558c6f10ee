#pragma once
// How the CUDA ops may trade exactness for speed or reproducibility. One setting per process (every
// rank of a process runs the same job); the CPU ops ignore it. Set it before the first op runs:
// cuDNN algorithm choices are cached per setting.
namespace pw::kernels {

// TF32 tensor-core math for fp32 convolutions and matrix products (10-bit mantissa inputs, fp32
// accumulation); off keeps plain fp32 FMA math, close to the CPU reference.
enum class Tf32 { Off, On };
// Deterministic: only cuDNN algorithms that give the same bits on every run, and embedding gradients
// summed in a fixed order instead of with atomics (slower).
enum class Determinism { Fastest, Deterministic };

struct MathMode {
  Tf32 tf32 = Tf32::Off;
  Determinism determinism = Determinism::Fastest;
  friend bool operator==(const MathMode&, const MathMode&) = default;
};

void set_math_mode(MathMode mode);
MathMode math_mode();

}  // namespace pw::kernels
