#pragma once
// Devices (pipewright/device.h), element types and shapes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/device.h"

namespace pw::kernels {

// DeviceType and Device: pipewright/device.h.

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
