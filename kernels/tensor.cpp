#include "kernels/tensor.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <sstream>

#include "core/log.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_probe.h"
#include "kernels/half_float.h"
#include "kernels/host_ledger.h"
#include "kernels/ops/cast.h"
#include "kernels/runtime.h"
#include "kernels/stream.h"

namespace pw::kernels {

Storage::Storage(Device device, std::size_t bytes)
    : device_(device), bytes_(bytes), allocator_(&DeviceRuntime::get(device).allocator()),
      data_(allocator_->allocate(bytes)) {}

Storage::Storage(HostMemory memory, std::size_t bytes) : device_(Device::cpu()), bytes_(bytes) {
  const std::size_t size = std::max<std::size_t>(bytes, 1);
#ifdef PW_WITH_CUDA
  if (memory == HostMemory::Pinned && cuda_device_count() > 0) {
    PW_CUDA_CHECK(cudaHostAlloc(&data_, size, cudaHostAllocPortable));
    pinned_ = true;
    return;
  }
#endif
  data_ = ::operator new(size, std::align_val_t{64});
}

Storage::Storage(HostMemory memory, std::size_t bytes, Device owner) : Storage(memory, bytes) {
  counted_ = true;
  owner_ = owner;
  kind_ = MemoryKindScope::current();
  detail::count_host_allocation(owner_, kind_, static_cast<std::int64_t>(bytes_));
}

Storage::~Storage() {
  if (counted_) detail::count_host_release(owner_, kind_, static_cast<std::int64_t>(bytes_));
  if (allocator_ != nullptr) {
    allocator_->deallocate(data_);
    return;
  }
#ifdef PW_WITH_CUDA
  if (pinned_) {
    const cudaError_t err = cudaFreeHost(data_);
    if (err != cudaSuccess) PW_LOG(Warn, "cudaFreeHost: " << cudaGetErrorString(err));
    return;
  }
#endif
  ::operator delete(data_, std::align_val_t{64});
}

namespace {
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef PW_WITH_CUDA
  if (dst_dev.is_cuda() && src_dev.is_cuda() && dst_dev != src_dev) {
    // Between two GPUs: the source's pending writes must land before the copy reads, and the
    // copy must finish before the source block can return to its device's cache. Host syncs
    // for now; events would keep both streams running.
    current_stream(src_dev).synchronize();
    CudaDeviceGuard guard(dst_dev.index);
    auto stream = static_cast<cudaStream_t>(current_stream(dst_dev).native());
    PW_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    PW_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  const Device cuda_dev = dst_dev.is_cuda() ? dst_dev : src_dev;
  CudaDeviceGuard guard(cuda_dev.index);
  auto stream = static_cast<cudaStream_t>(current_stream(cuda_dev).native());
  PW_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  // A host side is read or written right after: wait for it. On one device it stays async.
  if (dst_dev.is_cpu() || src_dev.is_cpu()) PW_CUDA_CHECK(cudaStreamSynchronize(stream));
#else
  throw Error("pipewright was built without CUDA; cannot copy between " + src_dev.str() + " and " + dst_dev.str());
#endif
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (auto d : shape) PW_CHECK(d >= 0, "negative dimension in shape " << shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(device, t.nbytes());
  return t;
}

Tensor Tensor::empty_pinned(const Shape& shape, DType dtype) {
  for (auto d : shape) PW_CHECK(d >= 0, "negative dimension in shape " << shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = Device::cpu();
  t.storage_ = std::make_shared<Storage>(HostMemory::Pinned, t.nbytes());
  return t;
}

Tensor Tensor::empty_host(const Shape& shape, DType dtype, Device owner) {
  for (auto d : shape) PW_CHECK(d >= 0, "negative dimension in shape " << shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = owner.is_cpu() ? owner : Device::cpu();
  t.storage_ = std::make_shared<Storage>(owner.is_cuda() ? HostMemory::Pinned : HostMemory::Pageable, t.nbytes(), owner);
  return t;
}

Tensor Tensor::zeros_host(const Shape& shape, DType dtype, Device owner) {
  Tensor t = empty_host(shape, dtype, owner);
  t.zero_();
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

template <typename T>
static Tensor from_host(const std::vector<T>& values, const Shape& shape, DType dtype, Device device) {
  PW_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape),
           values.size() << " values for shape " << shape_str(shape));
  Tensor t = Tensor::empty(shape, dtype, device);
  copy_bytes(t.raw(), device, values.data(), Device::cpu(), t.nbytes());
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& s, Device d) { return from_host(v, s, DType::F32, d); }
Tensor Tensor::from_vector(const std::vector<double>& v, const Shape& s, Device d) { return from_host(v, s, DType::F64, d); }
Tensor Tensor::from_vector(const std::vector<std::int64_t>& v, const Shape& s, Device d) { return from_host(v, s, DType::I64, d); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  const auto n = static_cast<std::size_t>(shape_numel(shape));
  switch (dtype) {
    case DType::F32: return from_vector(std::vector<float>(n, static_cast<float>(value)), shape, device);
    case DType::F64: return from_vector(std::vector<double>(n, value), shape, device);
    case DType::I64: return from_vector(std::vector<std::int64_t>(n, static_cast<std::int64_t>(value)), shape, device);
    default: PW_FAIL("Tensor::full does not support " << dtype_name(dtype));
  }
}

std::int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int k = i < 0 ? i + n : i;
  PW_CHECK(k >= 0 && k < n, "dimension " << i << " out of range for " << describe());
  return shape_[static_cast<std::size_t>(k)];
}

void* Tensor::raw() const {
  PW_CHECK(storage_ != nullptr, "use of an undefined tensor");
  return static_cast<char*>(storage_->data()) + byte_offset_;
}

Tensor Tensor::view(std::int64_t offset, const Shape& shape) const {
  PW_CHECK(offset >= 0 && offset + shape_numel(shape) <= numel(),
           "view of " << shape_str(shape) << " at element " << offset << " is outside " << describe());
  Tensor t = *this;
  t.shape_ = shape;
  t.byte_offset_ = byte_offset_ + static_cast<std::size_t>(offset) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  PW_CHECK(shape_numel(shape) == numel(), "cannot reshape " << describe() << " to " << shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::clone() const {
  const Device* owner = storage_ != nullptr ? storage_->host_owner() : nullptr;
  Tensor t = owner != nullptr ? empty_host(shape_, dtype_, *owner) : empty(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const { return cast(*this, dtype); }

void Tensor::copy_from(const Tensor& src) {
  PW_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from " << src.describe() << " into " << describe());
  copy_bytes(raw(), device_, src.raw(), src.device_, nbytes());
}

void Tensor::copy_from_on(const Tensor& src, const Stream& stream) {
  PW_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from_on " << src.describe() << " into " << describe());
  if (nbytes() == 0) return;
  if (device_.is_cpu() && src.device_.is_cpu()) {
    std::memcpy(raw(), src.raw(), nbytes());
    return;
  }
#ifdef PW_WITH_CUDA
  PW_CHECK(stream.device().is_cuda() && (stream.device() == device_ || stream.device() == src.device_),
           "copy_from_on: " << src.describe() << " into " << describe() << " on a stream of " << stream.device().str());
  CudaDeviceGuard guard(stream.device().index);
  PW_CUDA_CHECK(cudaMemcpyAsync(raw(), src.raw(), nbytes(), cudaMemcpyDefault, static_cast<cudaStream_t>(stream.native())));
#else
  (void)stream;
  throw Error("pipewright was built without CUDA; cannot copy between " + src.device_.str() + " and " + device_.str());
#endif
}

void Tensor::copy_elements_from(const Tensor& src, std::int64_t src_offset, std::int64_t dst_offset,
                                std::int64_t count) {
  PW_CHECK(src.dtype_ == dtype_, "copy_elements_from " << src.describe() << " into " << describe());
  PW_CHECK(count >= 0 && src_offset >= 0 && dst_offset >= 0 && src_offset + count <= src.numel() &&
               dst_offset + count <= numel(),
           "copy_elements_from: " << count << " elements at " << src_offset << " of " << src.describe() << " to "
                                  << dst_offset << " of " << describe() << " is out of range");
  const std::size_t size = dtype_size(dtype_);
  copy_bytes(static_cast<char*>(raw()) + static_cast<std::size_t>(dst_offset) * size, device_,
             static_cast<const char*>(src.raw()) + static_cast<std::size_t>(src_offset) * size, src.device_,
             static_cast<std::size_t>(count) * size);
}

void Tensor::zero_() {
  if (nbytes() == 0) return;
  if (device_.is_cpu()) {
    std::memset(raw(), 0, nbytes());
    return;
  }
#ifdef PW_WITH_CUDA
  CudaDeviceGuard guard(device_.index);
  PW_CUDA_CHECK(cudaMemsetAsync(raw(), 0, nbytes(), static_cast<cudaStream_t>(current_stream(device_).native())));
#endif
}

std::vector<double> Tensor::to_double_vector() const {
  const Tensor host = to(Device::cpu());
  std::vector<double> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (dtype_) {
      case DType::F32: out[i] = host.data<float>()[i]; break;
      case DType::F64: out[i] = host.data<double>()[i]; break;
      case DType::I64: out[i] = static_cast<double>(host.data<std::int64_t>()[i]); break;
      case DType::I32: out[i] = host.data<std::int32_t>()[i]; break;
      case DType::U8: out[i] = host.data<std::uint8_t>()[i]; break;
      case DType::BF16: out[i] = bf16_to_float(host.data<std::uint16_t>()[i]); break;
      case DType::F16: out[i] = f16_to_float(host.data<std::uint16_t>()[i]); break;
    }
  }
  return out;
}

std::vector<float> Tensor::to_float_vector() const {
  const auto d = to_double_vector();
  return {d.begin(), d.end()};
}

std::vector<std::int64_t> Tensor::to_int_vector() const {
  PW_CHECK(dtype_ == DType::I64, "to_int_vector needs I64, got " << describe());
  const Tensor host = to(Device::cpu());
  const auto* p = host.data<std::int64_t>();
  return {p, p + numel()};
}

double Tensor::item() const {
  PW_CHECK(numel() == 1, "item() of " << describe());
  return to_double_vector()[0];
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return dtype_name(dtype_) + shape_str(shape_) + " on " + device_.str();
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  PW_CHECK(a.shape() == b.shape(), what << ": shapes differ, " << a.describe() << " vs " << b.describe());
}

void check_device(const Tensor& t, Device device, const char* what) {
  PW_CHECK(t.device() == device, what << ": expected a tensor on " << device.str() << ", got " << t.describe());
}

void check_dtype(const Tensor& t, DType dtype, const char* what) {
  PW_CHECK(t.dtype() == dtype, what << ": expected " << dtype_name(dtype) << ", got " << t.describe());
}

}  // namespace pw::kernels
