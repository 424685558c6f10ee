#pragma once
// Device names ("cpu:0", "cuda:1") and element types.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace pw::kernels {

enum class DeviceType { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  // Parses "cpu", "cpu:N", "cuda", "cuda:N"; throws InputError naming the accepted forms.
  static Device parse(std::string_view text);
  static Device cpu(int index = 0) { return {DeviceType::CPU, index}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

// BF16 and F16 come last: a DType's value is its code in NCCL message headers.
enum class DType { F32, F64, I64, I32, U8, BF16, F16 };
bool is_floating_point(DType dtype);   // F32, F64, BF16, F16

std::size_t dtype_size(DType dtype);
std::string dtype_name(DType dtype);   // "F32", "F64", ... (safetensors spelling)
DType dtype_from_name(std::string_view name);

using Shape = std::vector<std::int64_t>;
std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);   // "[64, 1, 28, 28]"

}  // namespace pw::kernels

template <>
struct std::hash<pw::kernels::Device> {
  std::size_t operator()(const pw::kernels::Device& d) const noexcept {
    return std::hash<int>()(static_cast<int>(d.type) * 4096 + d.index);
  }
};
