#pragma once
// A dense, contiguous, row-major tensor on one device. Copies share storage (like a handle);
// clone() makes a deep copy. Storage comes from the device's caching allocator.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"
#include "kernels/allocator.h"
#include "kernels/device.h"

namespace pw::kernels {

class CachingAllocator;
class Stream;

// Where a host tensor's bytes come from: the CPU device's caching allocator, or page-locked
// memory that a GPU copies from without staging (cudaHostAlloc; plain memory where no GPU is).
enum class HostMemory { Pageable, Pinned };

class Storage {
 public:
  Storage(Device device, std::size_t bytes);
  Storage(HostMemory memory, std::size_t bytes);   // host bytes outside every device's cap
  // The same, held on `owner`'s behalf: counted in host_memory_stats(owner) (kernels/host_ledger.h)
  // under the kind of the MemoryKindScope open now.
  Storage(HostMemory memory, std::size_t bytes, Device owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }
  // The device whose host memory this is (the three-argument constructor), else nullptr.
  const Device* host_owner() const { return counted_ ? &owner_ : nullptr; }

 private:
  Device device_;
  std::size_t bytes_;
  CachingAllocator* allocator_ = nullptr;   // looked up once: the runtime registry takes a global lock
  void* data_ = nullptr;
  bool pinned_ = false;   // page-locked by CUDA (freed with cudaFreeHost)
  bool counted_ = false;  // in the host ledger under owner_ and kind_
  Device owner_;
  MemoryKind kind_ = MemoryKind::Workspace;
};

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32, Device device = Device::cpu());
  // A host tensor (on cpu:0) in page-locked memory where a GPU is present, so copies to the GPU run
  // asynchronously; counted against no device's cap.
  static Tensor empty_pinned(const Shape& shape, DType dtype = DType::F32);
  // Host memory that `owner`'s work keeps outside `owner`'s cap (offloaded optimizer state),
  // page-locked where `owner` is a GPU, counted in host_memory_stats(owner) by the kind of the
  // MemoryKindScope open now. Its device is `owner` when that is a CPU device (so ops on it run in
  // that device's threads beside the device's own tensors), else cpu:0. Clones stay host memory.
  static Tensor empty_host(const Shape& shape, DType dtype, Device owner);
  static Tensor zeros_host(const Shape& shape, DType dtype, Device owner);
  // Host values copied onto `device`.
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<std::int64_t>& values, const Shape& shape, Device device = Device::cpu());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int i) const;   // negative i counts from the end
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  void* raw() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }

  // Same storage, new shape with the same element count.
  Tensor reshape(const Shape& shape) const;
  // `shape`'s elements of this tensor's storage from flat element `offset` on, shared (writes
  // show in both): data-parallel gradients live in their bucket's flat buffer this way.
  Tensor view(std::int64_t offset, const Shape& shape) const;
  Tensor clone() const;
  Tensor to(Device device) const;   // returns *this when already there
  Tensor to(DType dtype) const;     // between F32, F64, BF16 and F16 on this device (kernels/ops/cast.h)
  void copy_from(const Tensor& src);   // same shape and dtype, any devices
  // Elements [src_offset, src_offset + count) of `src` into [dst_offset, ...) of this tensor, in
  // flat (row-major) order; same dtype, any devices. Gradient buckets pack and unpack with it.
  void copy_elements_from(const Tensor& src, std::int64_t src_offset, std::int64_t dst_offset, std::int64_t count);
  void zero_();
  // The same copy ordered on `stream` (of the CUDA device on one side) and not waited for: `src`
  // must stay alive and unchanged, and this tensor unread, until the stream has passed it. From
  // pinned memory the host goes on at once. CPU to CPU it is copy_from.
  void copy_from_on(const Tensor& src, const Stream& stream);
  bool is_pinned() const { return storage_ != nullptr && storage_->pinned(); }
  // Made by empty_host (or cloned from such a tensor): outside every device's cap.
  bool is_host_memory() const { return storage_ != nullptr && storage_->host_owner() != nullptr; }
  // How many tensors share this one's storage (itself included): a buffer pool reuses a tensor
  // whose count has fallen back to its own 1.
  long storage_users() const { return storage_.use_count(); }

  // Host copy of the values as double / int64 (any device, any float dtype).
  std::vector<double> to_double_vector() const;
  std::vector<float> to_float_vector() const;
  std::vector<std::int64_t> to_int_vector() const;
  double item() const;   // single-element tensors

  std::string describe() const;   // "F32[64, 10] on cpu:0"

 private:
  std::shared_ptr<Storage> storage_;
  std::size_t byte_offset_ = 0;   // into storage_, for views
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_;
};

// Throws with `what` and both shapes when they differ.
void check_same_shape(const Tensor& a, const Tensor& b, const char* what);
void check_device(const Tensor& t, Device device, const char* what);
void check_dtype(const Tensor& t, DType dtype, const char* what);

}  // namespace pw::kernels
