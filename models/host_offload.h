#pragma once
// ZeRO-Offload's half of an optimizer step: optimizer state kept in host memory, outside the
// parameters' device and its cap, and the update run there by the vectorised CPU optimizer.
//
// What the update writes is either the device's weights (fp32 training: the weights the device
// computes with) or, under mixed precision, an fp32 master that itself lives in host memory; the
// device then keeps only the 16-bit weights, which the host rounds from the updated master.
//
// On a CPU device the host is where the parameters already are: the update reads the gradients
// and writes the weights (or the master, and rounds it into the 16-bit weights) in place, and only
// the state and the masters live apart (Tensor::empty_host, counted in host_memory_stats, not in
// the device's allocator). On a GPU each updated tensor's gradient (and fp32 weights, not a host
// master) are copied into page-locked host buffers on a copy stream of their own, in update order,
// so that the copies of the next tensor run while the host updates this one; each updated weight
// (or the master's 16-bit rounding) goes back on the same stream, and the device's stream waits
// for the last of them with an event, not the host. Device weights stay what forward reads and
// what checkpoints, broadcasts and rollbacks write, so fp32 weights are copied down with the
// gradients every step and no second copy can fall out of step with them.
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

  // One tensor's update (views of a slice where the state is sharded): what it writes, `value`
  // (the device's weights, or an fp32 master in host memory: Tensor::is_host_memory), and its
  // gradient on the device. With a host master, `rounded` is the device's 16-bit weights, which
  // get the updated master's rounding (kernels::host_round); undefined otherwise.
  struct Item {
    Tensor value;
    Tensor grad;
    Tensor rounded;
  };
  // update(i, value, grad) updates item i given host tensors of its weights or master (written
  // back, or rounded into `rounded`, afterwards) and gradient; run calls it for every item, in
  // order.
  using Update = std::function<void(std::size_t i, Tensor& value, const Tensor& grad)>;
  void run(const std::vector<Item>& items, const Update& update);

 private:
  struct Staging {
    Tensor value, grad;   // page-locked host copies (no value where the item's is a host master)
    Tensor rounded;       // page-locked: the master's 16-bit rounding, copied up
  };
  void run_staged(const std::vector<Item>& items, const Update& update);

  kernels::Device device_;
  std::unique_ptr<kernels::Stream> copy_stream_;   // GPU only
  std::vector<Staging> staging_;                   // GPU only, by item
  std::vector<kernels::Event> arrived_;            // GPU only, by item
};

}  // namespace pw::models
