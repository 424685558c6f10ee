#include "kernels/device.h"

#include <charconv>
#include <sstream>

#include "core/error.h"

namespace pw::kernels {

Device Device::parse(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  int index = 0;
  bool ok = kind == "cpu" || kind == "cuda";
  if (ok && colon != std::string_view::npos) {
    const std::string_view digits = text.substr(colon + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    ok = ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && index >= 0;
  }
  PW_INPUT_CHECK(ok, "bad device '" << text << "'; expected cpu, cpu:N, cuda or cuda:N (N >= 0)");
  return {kind == "cpu" ? DeviceType::CPU : DeviceType::CUDA, index};
}

std::string Device::str() const { return (is_cpu() ? "cpu:" : "cuda:") + std::to_string(index); }

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I64: return 8;
    case DType::I32: return 4;
    case DType::U8: return 1;
    case DType::BF16: return 2;
    case DType::F16: return 2;
  }
  PW_FAIL("unknown dtype " << static_cast<int>(dtype));
}

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::U8: return "U8";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
  }
  PW_FAIL("unknown dtype " << static_cast<int>(dtype));
}

DType dtype_from_name(std::string_view name) {
  if (name == "F32") return DType::F32;
  if (name == "F64") return DType::F64;
  if (name == "I64") return DType::I64;
  if (name == "I32") return DType::I32;
  if (name == "U8") return DType::U8;
  if (name == "BF16") return DType::BF16;
  if (name == "F16") return DType::F16;
  throw InputError("unsupported dtype '" + std::string(name) + "'; accepted: F32, F64, BF16, F16, I64, I32, U8");
}

bool is_floating_point(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::BF16 || dtype == DType::F16;
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

}  // namespace pw::kernels
