#pragma once
// Vectorised dense optimizer updates on F32 host memory (ZeRO-Offload's CPU Adam, and SGD and
// Adagrad beside it), one code path per instruction set, chosen at run time. Every path performs
// the reference's operations (kernels/cpu/optimizer.cpp) in the reference's order, lane by lane,
// with no fused multiply-add (the build passes -ffp-contract=off) and IEEE-exact division and
// square root, so all of them give the reference's bits.
#include <cstdint>

#include "kernels/ops/optimizer.h"

namespace pw::kernels::cpu {

enum class VectorIsa { Scalar, Avx2, Avx512 };
const char* vector_isa_name(VectorIsa isa);   // "scalar", "avx2", "avx512"
bool vector_isa_supported(VectorIsa isa);     // by this CPU (and its OS)
VectorIsa best_vector_isa();                   // AVX-512 where supported, else AVX2, else scalar

// One step's constants in F32, computed as the reference computes them.
struct AdamStepConstants {
  float step_size, bias2_sqrt, b1, b2, one_minus_b1, one_minus_b2, eps, wd;
  bool decay;
};
AdamStepConstants adam_step_constants(const AdamParams& p, std::int64_t step);

struct SgdStepConstants {
  float lr, wd, mu;
  bool decay, momentum, first_step;
};
SgdStepConstants sgd_step_constants(const SgdParams& p, std::int64_t step);

struct AdagradStepConstants {
  float lr, eps, wd;
  bool decay;
};
AdagradStepConstants adagrad_step_constants(const AdagradParams& p);

// Elements [0, n) on the calling thread. `isa` must be supported (vector_isa_supported).
void adam_update_f32(VectorIsa isa, float* w, const float* g, float* m, float* v, std::int64_t n,
                     const AdamStepConstants& c);
// `buf` may be null when c.momentum is false.
void sgd_update_f32(VectorIsa isa, float* w, const float* g, float* buf, std::int64_t n, const SgdStepConstants& c);
void adagrad_update_f32(VectorIsa isa, float* w, const float* g, float* sum_sq, std::int64_t n,
                        const AdagradStepConstants& c);

}  // namespace pw::kernels::cpu
