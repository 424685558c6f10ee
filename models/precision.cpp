#include "models/precision.h"

#include "core/error.h"

namespace pw::models {

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::Fp32;
  if (text == "bf16") return Precision::Bf16;
  if (text == "fp16") return Precision::Fp16;
  throw InputError("unknown precision '" + text + "'; accepted: fp32, bf16, fp16");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Bf16: return "bf16";
    case Precision::Fp16: return "fp16";
  }
  return "?";
}

kernels::DType activation_dtype(Precision p) {
  switch (p) {
    case Precision::Bf16: return kernels::DType::BF16;
    case Precision::Fp16: return kernels::DType::F16;
    case Precision::Fp32: break;
  }
  return kernels::DType::F32;
}

}  // namespace pw::models
