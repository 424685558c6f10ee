#include "models/precision.h"

#include "core/error.h"

namespace pw::models {

Precision parse_precision(const std::string& text) { return parse_enum<Precision>(text); }

const char* precision_name(Precision p) { return enum_name(p).data(); }   // the table's names are literals

kernels::DType activation_dtype(Precision p) {
  switch (p) {
    case Precision::Bf16: return kernels::DType::BF16;
    case Precision::Fp16: return kernels::DType::F16;
    case Precision::Fp32: break;
  }
  return kernels::DType::F32;
}

}  // namespace pw::models
