#include "models/host_offload.h"

#include "kernels/allocator.h"
#include "kernels/ops/host_optimizer.h"

namespace pw::models {

HostOffload::HostOffload(kernels::Device device) : device_(device) {
  if (device_.is_cuda()) copy_stream_ = std::make_unique<kernels::Stream>(device_);
}

HostOffload::~HostOffload() {
  // The copies still in flight read and write the staging buffers: let them land first.
  if (copy_stream_) {
    try {
      copy_stream_->synchronize();
    } catch (...) {
    }
  }
}

Tensor HostOffload::zeros(const kernels::Shape& shape, kernels::DType dtype) const {
  return Tensor::zeros_host(shape, dtype, device_);
}

namespace {

void check_item(std::size_t i, const HostOffload::Item& item) {
  // A master in host memory has 16-bit weights on the device, and those have a master.
  PW_CHECK(item.rounded.defined() == item.value.is_host_memory() &&
               (!item.rounded.defined() ||
                (item.value.dtype() == kernels::DType::F32 && item.rounded.numel() == item.value.numel())),
           "offloaded update " << i << ": 16-bit weights " << item.rounded.describe() << " rounded from "
                               << item.value.describe() << ", which is not an fp32 master of as many elements in host memory");
}

}  // namespace

void HostOffload::run(const std::vector<Item>& items, const Update& update) {
  for (std::size_t i = 0; i < items.size(); ++i) check_item(i, items[i]);
  if (device_.is_cuda()) {
    run_staged(items, update);
    return;
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    Tensor value = items[i].value;
    update(i, value, items[i].grad);
    if (items[i].rounded.defined()) {
      Tensor rounded = items[i].rounded;   // the device's memory is host memory here
      kernels::host_round(value, rounded);
    }
  }
}

void HostOffload::run_staged(const std::vector<Item>& items, const Update& update) {
  if (staging_.size() != items.size()) {
    staging_.clear();
    arrived_.clear();
    for (const auto& item : items) {
      Staging s;
      if (!item.value.is_host_memory()) {
        kernels::MemoryKindScope kind(kernels::MemoryKind::MasterWeights);
        s.value = Tensor::empty_host(item.value.shape(), item.value.dtype(), device_);
      }
      if (item.rounded.defined()) {
        kernels::MemoryKindScope kind(kernels::MemoryKind::Parameters);
        s.rounded = Tensor::empty_host(item.rounded.shape(), item.rounded.dtype(), device_);
      }
      {
        kernels::MemoryKindScope kind(kernels::MemoryKind::Gradients);
        s.grad = Tensor::empty_host(item.grad.shape(), item.grad.dtype(), device_);
      }
      staging_.push_back(std::move(s));
      arrived_.emplace_back(device_);
    }
  }
  auto& compute = kernels::current_stream(device_);
  kernels::Event ready(device_);
  ready.record(compute);   // the gradients are final and the weights current on the compute stream
  ready.wait_on(*copy_stream_);
  for (std::size_t i = 0; i < items.size(); ++i) {
    Staging& s = staging_[i];
    const bool master = items[i].value.is_host_memory();
    PW_CHECK(s.grad.shape() == items[i].grad.shape() && master == !s.value.defined() &&
                 (master || s.value.shape() == items[i].value.shape()) &&
                 s.rounded.defined() == items[i].rounded.defined(),
             "offloaded update " << i << ": staged for " << (s.value.defined() ? s.value : s.grad).describe()
                                 << ", given " << items[i].value.describe());
    s.grad.copy_from_on(items[i].grad, *copy_stream_);
    if (!master) s.value.copy_from_on(items[i].value, *copy_stream_);
    arrived_[i].record(*copy_stream_);
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    Staging& s = staging_[i];
    // Also orders this step's writes into the staging after the last step's copies up from it:
    // they were queued on the copy stream before this event.
    arrived_[i].synchronize();
    if (items[i].rounded.defined()) {
      Tensor master = items[i].value;   // host memory, updated in place
      update(i, master, s.grad);
      kernels::host_round(master, s.rounded);
      Tensor device_weights = items[i].rounded;
      device_weights.copy_from_on(s.rounded, *copy_stream_);
    } else {
      update(i, s.value, s.grad);
      Tensor device_value = items[i].value;
      device_value.copy_from_on(s.value, *copy_stream_);
    }
  }
  kernels::Event written(device_);
  written.record(*copy_stream_);
  written.wait_on(compute);   // what runs next on the device reads the updated weights
}

}  // namespace pw::models
