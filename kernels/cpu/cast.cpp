// Conversions between F32, F64, BF16 and F16 on the CPU: each element through float (or double
// between F32 and F64), in parallel chunks.
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/half_float.h"

namespace pw::kernels::cpu {
namespace {

double load(DType dtype, const void* base, std::int64_t i) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::F64: return static_cast<const double*>(base)[i];
    case DType::BF16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::F16: return f16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    default: PW_FAIL("cast: unsupported source dtype " << dtype_name(dtype));
  }
}

void store(DType dtype, void* base, std::int64_t i, double v) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::F64: static_cast<double*>(base)[i] = v; return;
    // Double -> float is exact for every value a BF16/F16 source or an F32 source holds; from F64
    // the two roundings can differ from one direct rounding only at exact float ties (negligible).
    case DType::BF16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v)); return;
    case DType::F16: static_cast<std::uint16_t*>(base)[i] = float_to_f16(static_cast<float>(v)); return;
    default: PW_FAIL("cast: unsupported target dtype " << dtype_name(dtype));
  }
}

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  const void* src = x.raw();
  void* dst = out.raw();
  const DType from = x.dtype();
  parallel_chunks(x.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) store(dtype, dst, i, load(from, src, i));
  });
  return out;
}

}  // namespace pw::kernels::cpu
