// Conversions between F32, F64, BF16 and F16 on the CPU: one typed loop per (from, to) pair, each
// element through its compute type (float, or double for F64), in parallel chunks.
#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {

Tensor cast(const Tensor& x, DType dtype) {
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  visit_any_float(x.dtype(), "cast (source)", [&](auto from_tag) {
    using From = decltype(from_tag);
    visit_any_float(dtype, "cast (target)", [&](auto to_tag) {
      using To = decltype(to_tag);
      const From* src = x.data<From>();
      To* dst = out.data<To>();
      // Double -> float is exact for every value a BF16/F16 source or an F32 source holds; from F64
      // the two roundings can differ from one direct rounding only at exact float ties (negligible).
      parallel_chunks(x.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) dst[i] = store<To>(static_cast<compute_t<To>>(load(src[i])));
      });
    });
  });
  return out;
}

}  // namespace pw::kernels::cpu
