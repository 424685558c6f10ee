#include "models/host_offload.h"

#include "kernels/allocator.h"

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

void HostOffload::run(const std::vector<Item>& items, const Update& update) {
  if (device_.is_cuda()) {
    run_staged(items, update);
    return;
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    Tensor value = items[i].value;
    update(i, value, items[i].grad);
  }
}

void HostOffload::run_staged(const std::vector<Item>& items, const Update& update) {
  if (staging_.size() != items.size()) {
    staging_.clear();
    arrived_.clear();
    for (const auto& item : items) {
      Staging s;
      {
        kernels::MemoryKindScope kind(kernels::MemoryKind::MasterWeights);
        s.value = Tensor::empty_host(item.value.shape(), item.value.dtype(), device_);
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
    PW_CHECK(s.value.shape() == items[i].value.shape() && s.grad.shape() == items[i].grad.shape(),
             "offloaded update " << i << ": staged for " << s.value.describe() << ", given "
                                 << items[i].value.describe());
    s.grad.copy_from_on(items[i].grad, *copy_stream_);
    s.value.copy_from_on(items[i].value, *copy_stream_);
    arrived_[i].record(*copy_stream_);
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    Staging& s = staging_[i];
    arrived_[i].synchronize();
    update(i, s.value, s.grad);
    Tensor device_value = items[i].value;
    device_value.copy_from_on(s.value, *copy_stream_);
  }
  kernels::Event written(device_);
  written.record(*copy_stream_);
  written.wait_on(compute);   // what runs next on the device reads the updated weights
}

}  // namespace pw::models
