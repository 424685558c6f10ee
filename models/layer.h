#pragma once
// The Layer interface (after tiny-cuda-nn's object.h): non-virtual public forward/backward that
// check shapes and call virtual *_impl. forward returns an owned per-micro-batch Context holding
// what backward needs; dropping it and calling forward again is recomputation. Backward
// accumulates parameter gradients and can run as two halves: backward_input (the input gradient,
// on the critical path of a pipeline) and backward_weight (the parameter gradients, deferrable,
// as zero-bubble schedules want).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/tensor.h"
#include "pipewright/model.h"
#include "models/precision.h"

namespace pw::models {

using kernels::Device;
using kernels::Shape;
using kernels::Tensor;
using kernels::shape_numel;
using kernels::shape_str;

// Recompute: the forward of a micro-batch run again to rebuild a dropped Context. It computes
// exactly what its Train forward did (same dropout mask under the same ForwardKey) but leaves
// state alone (batch-norm running statistics are not updated twice).
enum class Mode { Train, Eval, Recompute };
// Bias and WeightInit: pipewright/model.h.

// How a parameter is initialised; drawn from an RNG seeded by (model seed, full parameter name).
struct Init {
  // KeyedRows: row r of a 2-D parameter is keyed_uniform_row(seed, r, ...) (models/rng.h): a row
  // depends on its key alone, so a table built row by row elsewhere starts from the same rows.
  enum class Kind { Zeros, Ones, Uniform, Normal, KeyedRows };
  Kind kind = Kind::Zeros;
  double a = 0.0;   // Uniform: bound (values in [-a, a)); Normal: standard deviation
  static Init zeros() { return {Kind::Zeros, 0.0}; }
  static Init ones() { return {Kind::Ones, 0.0}; }
  static Init uniform(double bound) { return {Kind::Uniform, bound}; }
  static Init normal(double stddev) { return {Kind::Normal, stddev}; }
  static Init keyed_rows(double bound) { return {Kind::KeyedRows, bound}; }
};

struct Parameter {
  std::string name;   // local name: "weight"
  // F32 (the master copy under mixed precision). With sharded optimizer state under mixed
  // precision a weight with a 16-bit copy holds that copy here instead (and `compute` is the same
  // tensor); its F32 master exists only for the replica's own slices (models::ParameterSlice).
  // Offloaded (models::Optimizer), the same: the master lives in host memory, where a stage built
  // under ParameterHome::Host had made this F32 value from the start.
  Tensor value;
  Tensor grad;        // same shape and dtype, accumulated by backward, zeroed by zero_grad
  Init init;
  // Mixed precision: `value` rounded to the activations' dtype, what convolutions and matrix
  // products read; made by Layer::refresh_compute_copies once per step. Undefined in fp32.
  Tensor compute;
};

// A non-trained tensor that is part of the model's state (batch-norm running statistics).
struct Buffer {
  std::string name;
  Tensor value;
  Init init;
};

// The device new layers put their parameters on: cpu:0 unless a LayerDeviceScope on this thread
// names another, so a pipeline stage builds its layers straight onto its own (capped) device.
Device default_layer_device();

class LayerDeviceScope {
 public:
  explicit LayerDeviceScope(Device device);
  ~LayerDeviceScope();
  LayerDeviceScope(const LayerDeviceScope&) = delete;
  LayerDeviceScope& operator=(const LayerDeviceScope&) = delete;

 private:
  Device previous_;
};

// Where new layers make their fp32 parameter values: on the layer's device, or in host memory held
// for it outside its cap (Tensor::zeros_host, counted as master weights). Host is for a stage whose
// device will hold no whole fp32 masters under bf16/fp16: offloaded (--offload-optimizer), they live
// in host memory; sharded over replicas, the gradient buckets copy each replica's segment of them
// onto the device and let the rest go. Built there, they never take device room, and the device
// only ever receives the 16-bit copies. set_precision moves every value that does not become such
// a master (biases, norms, anything in fp32) onto the device.
enum class ParameterHome { Device, Host };
ParameterHome default_parameter_home();

class ParameterHomeScope {
 public:
  explicit ParameterHomeScope(ParameterHome home);
  ~ParameterHomeScope();
  ParameterHomeScope(const ParameterHomeScope&) = delete;
  ParameterHomeScope& operator=(const ParameterHomeScope&) = delete;

 private:
  ParameterHome previous_;
};

class Context {
 public:
  virtual ~Context() = default;
  Shape input_shape;
  Shape output_shape;
  // The dtype the input came in and the one forward_impl produced: backward converts the incoming
  // gradient to the latter and its input gradient to the former (mixed precision).
  kernels::DType input_dtype = kernels::DType::F32;
  kernels::DType produced_dtype = kernels::DType::F32;
  Tensor grad_output;   // kept by backward_input for backward_weight
  bool input_grad_done = false;
};

class Layer {
 public:
  virtual ~Layer() = default;
  Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  struct Output {
    Tensor y;
    std::unique_ptr<Context> ctx;
  };

  Output forward(const Tensor& x, Mode mode);
  // Full backward: the input gradient, and parameter gradients accumulated.
  Tensor backward(Context& ctx, const Tensor& grad_y);
  Tensor backward_input(Context& ctx, const Tensor& grad_y);
  void backward_weight(Context& ctx);

  // Output shape for an input shape (batch dimension included); throws on a mismatch.
  Shape output_shape(const Shape& input) const { return output_shape_impl(input); }
  // Elements of every intermediate activation this layer keeps for one input.
  virtual std::int64_t activation_elements(const Shape& input) const;

  virtual std::string type_name() const = 0;
  // An input of `shape` this layer accepts, drawn from `seed`, for the profiler to time it with:
  // F32 uniform in [-1, 1), or (a layer that reads ids, as DLRM's packed click rows) what it reads.
  // A Sequential's is its first child's.
  virtual Tensor example_input(const Shape& shape, kernels::Device device, std::uint64_t seed) const;
  // Whether forward rounds a float input to the activation dtype before anything reads it
  // (convolution and linear layers under mixed precision): a loader may then hand over 16-bit
  // inputs, rounded as the layer would round them, and the results are bitwise the same.
  enum class InputRounding { None, ToActivationDtype };
  virtual InputRounding input_rounding() const { return InputRounding::None; }

  // Dotted names: "layer1.0.conv1.weight".
  std::vector<std::pair<std::string, Parameter*>> named_parameters(const std::string& prefix = "");
  std::vector<std::pair<std::string, Buffer*>> named_buffers(const std::string& prefix = "");
  std::vector<Parameter*> parameters();
  std::int64_t parameter_count();
  const std::vector<std::pair<std::string, std::unique_ptr<Layer>>>& children() const { return children_; }

  void initialize(std::uint64_t seed, const std::string& prefix = "");
  // This layer and its children compute in `precision` (models/precision.h): floating outputs are
  // stored in its activation dtype, convolutions and matrix products read 16-bit copies of their
  // weights. Makes the copies (refresh_compute_copies) on the layer's device. A value in host memory
  // (ParameterHome::Host) stays there only where it is the fp32 master of such a copy.
  void set_precision(Precision precision);
  Precision precision() const { return precision_; }
  // Re-rounds every weight's 16-bit copy from its F32 value; call after the values change (an
  // optimizer step, a restore, a broadcast) and before the next forward. No-op in fp32.
  void refresh_compute_copies();
  void to(Device device);
  Device device() const { return device_; }
  void zero_grad();

 protected:
  virtual Output forward_impl(const Tensor& x, Mode mode) = 0;
  virtual Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) = 0;
  virtual void backward_weight_impl(Context& /*ctx*/, const Tensor& /*grad_y*/) {}
  // Default: input half then weight half. Containers override it to run each child's full
  // backward in turn, so no layer holds its output gradient longer than needed.
  virtual Tensor backward_impl(Context& ctx, const Tensor& grad_y);
  virtual Shape output_shape_impl(const Shape& input) const = 0;
  // Layers whose forward_impl/backward_*_impl take only F32/F64 floats say No: under mixed
  // precision the base class hands them F32 inputs (and converts their outputs to the activation
  // dtype), as autocast runs its fp32 ops.
  enum class LowPrecisionInput { Accepted, No };
  virtual LowPrecisionInput low_precision_input() const { return LowPrecisionInput::Accepted; }
  // The weights this layer's ops read: p.value in fp32, else its 16-bit copy.
  const Tensor& compute_weight(const Parameter& p) const;
  // x in the activation dtype under mixed precision (the model's F32 input), else x itself.
  Tensor as_compute_dtype(const Tensor& x) const {
    return precision_ == Precision::Fp32 ? x : x.to(activation_dtype());
  }
  // The activation dtype of this layer's precision (F32 in fp32).
  kernels::DType activation_dtype() const { return models::activation_dtype(precision_); }
  // Parameters with 16-bit copies (convolution and linear weights); others stay F32 only.
  virtual std::vector<Parameter*> compute_copied_parameters() { return {}; }

  Parameter& add_parameter(const std::string& name, const Shape& shape, Init init);
  Buffer& add_buffer(const std::string& name, const Shape& shape, Init init);
  Layer& add_child(const std::string& name, std::unique_ptr<Layer> layer);

  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::pair<std::string, std::unique_ptr<Layer>>> children_;
  Device device_ = default_layer_device();
  Precision precision_ = Precision::Fp32;
};

}  // namespace pw::models
