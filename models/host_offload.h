#pragma once
// ZeRO-Offload's half of an optimizer step: optimizer state kept in host memory, outside the
// parameters' device and its cap, and the update run there by the vectorised CPU optimizer.
//
// On a CPU device the host is where the parameters already are: the update reads the gradients
// and writes the weights in place, and only the state lives apart (Tensor::empty_host, counted in
// host_memory_stats, not in the device's allocator). On a GPU each updated tensor's gradient and
// weights are copied into page-locked host buffers on a copy stream of their own, in update order
// so that the copies of the next tensor run while the host updates this one; each updated weight
// goes back on the same stream, and the device's stream waits for the last of them with an event,
// not the host. The device's weights stay what forward reads and what checkpoints, broadcasts and
// rollbacks write, so they are copied down with the gradients every step and no second copy can
// fall out of step with them.
#include <functional>
#include <memory>
#include <vector>

#include "kernels/stream.h"
#include "kernels/tensor.h"

namespace pw::models {

using kernels::Tensor;

class HostOffload {
 public:
  explicit HostOffload(kernels::Device device);   // the device the parameters live on
  ~HostOffload();
  HostOffload(const HostOffload&) = delete;
  HostOffload& operator=(const HostOffload&) = delete;

  kernels::Device device() const { return device_; }
  // Zeroed host memory held for the device (under the kind of the MemoryKindScope open now).
  Tensor zeros(const kernels::Shape& shape, kernels::DType dtype) const;

  // One tensor's update: its weights and gradient on the device (views of a slice where the state
  // is sharded) and its host state.
  struct Item {
    Tensor value;
    Tensor grad;
  };
  // update(i, value, grad) updates item i given host tensors of its weights (written back
  // afterwards) and gradient; run calls it for every item, in order.
  using Update = std::function<void(std::size_t i, Tensor& value, const Tensor& grad)>;
  void run(const std::vector<Item>& items, const Update& update);

 private:
  struct Staging {
    Tensor value, grad;   // page-locked host copies
  };
  void run_staged(const std::vector<Item>& items, const Update& update);

  kernels::Device device_;
  std::unique_ptr<kernels::Stream> copy_stream_;   // GPU only
  std::vector<Staging> staging_;                   // GPU only, by item
  std::vector<kernels::Event> arrived_;            // GPU only, by item
};

}  // namespace pw::models
