#include "pipeline/input_stager.h"

#include "core/error.h"

namespace pw::pipeline {

using kernels::Tensor;

InputStager::InputStager(kernels::Device device) : device_(device) {
  if (device_.is_cuda()) {
    copy_stream_.emplace(device_);
    released_.emplace(device_);
  }
}

InputStager::~InputStager() {
  // The copies may still read host parts and write the buffer: let them finish first.
  if (copy_stream_) {
    try {
      copy_stream_->synchronize();
    } catch (...) {
    }
  }
}

void InputStager::drain_previous_copies() {
  for (auto& e : copied_) e.synchronize();   // long done, normally: they ran during the last step
  host_.clear();
}

void InputStager::stage(const std::vector<Tensor>& parts) {
  staged_.assign(parts.size(), Tensor());
  if (!device_.is_cuda()) {
    host_ = parts;
    return;
  }
  drain_previous_copies();
  host_ = parts;   // take() falls back to them for parts with nothing to copy
  std::size_t index = 0;
  const Tensor* first = nullptr;
  std::int64_t elements = 0;
  for (const auto& p : parts) {
    if (!p.defined() || p.numel() == 0) continue;
    if (first == nullptr) first = &p;
    PW_CHECK(p.dtype() == first->dtype(), "micro-batch parts of different dtypes: " << first->describe() << " and "
                                                                                   << p.describe());
    elements += p.numel();
  }
  if (first == nullptr) return;
  if (!buffer_.defined() || buffer_.dtype() != first->dtype() || buffer_.numel() < elements) {
    buffer_ = Tensor();
    buffer_ = Tensor::empty({elements}, first->dtype(), device_);
    // A fresh block may have been freed while work queued on the compute stream still used it.
    released_->record(kernels::current_stream(device_));
    release_recorded_ = true;
  }
  if (release_recorded_) released_->wait_on(*copy_stream_);
  while (copied_.size() < parts.size()) copied_.emplace_back(device_);
  std::int64_t offset = 0;
  for (const auto& p : parts) {
    if (p.defined() && p.numel() != 0) {
      Tensor dst = buffer_.view(offset, p.shape());
      dst.copy_from_on(p, *copy_stream_);
      copied_[index].record(*copy_stream_);
      staged_[index] = std::move(dst);
      offset += p.numel();
    }
    ++index;
  }
}

Tensor InputStager::take(int m) {
  PW_CHECK(m >= 0 && static_cast<std::size_t>(m) < staged_.size(),
           "micro-batch " << m << " of " << staged_.size() << " staged");
  const auto i = static_cast<std::size_t>(m);
  if (!device_.is_cuda() || !staged_[i].defined()) {
    const Tensor& host = host_.at(i);
    return host.defined() ? host.to(device_) : host;
  }
  copied_[i].wait_on(kernels::current_stream(device_));
  return staged_[i];
}

void InputStager::release() {
  if (!device_.is_cuda() || staged_.empty()) return;
  released_->record(kernels::current_stream(device_));
  release_recorded_ = true;
}

}  // namespace pw::pipeline
