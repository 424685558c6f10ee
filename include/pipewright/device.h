#pragma once
// Where a rank runs: a CPU or a CUDA device and its index, written "cpu:0" or "cuda:1" in a job's
// JSON form, on the command line and in messages.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

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
  std::string str() const;   // "cpu:0", "cuda:1"
  // Spelled out: the public headers also compile as C++17 (a parent project's default standard).
  friend bool operator==(const Device& a, const Device& b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

}  // namespace pw::kernels

template <>
struct std::hash<pw::kernels::Device> {
  std::size_t operator()(const pw::kernels::Device& d) const noexcept {
    return std::hash<int>()(static_cast<int>(d.type) * 4096 + d.index);
  }
};
