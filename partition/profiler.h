#pragma once
// Measures each layer on the target device: forward and backward time per micro-batch, the
// activation it sends on, what its Context keeps for backward, and its parameter memory. Memory is
// measured on each layer alone; times in a chain, as a stage runs its layers (forward through
// them in order, backward in reverse): a layer repeated alone finds its weights, input and stash
// still in the core's caches, and at small micro-batches ran 10-30% faster than in a chain.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/device.h"
#include "models/optimizer.h"
#include "partition/model_description.h"

namespace pw::partition {

struct LayerProfile {
  std::string name;
  kernels::Shape output_shape;      // micro-batch dimension included
  std::int64_t parameters = 0;
  double forward_seconds = 0.0;     // per micro-batch in a chain, median of the repeats
  double backward_seconds = 0.0;    // full backward (input and weight gradients)
  // The backward as two halves, as zero-bubble schedules run it: the input gradient
  // (backward_input) and the weight gradients (backward_weight) of the same micro-batch. Together
  // more than the fused backward (a convolution's or batch norm's shared work is done twice).
  double input_half_seconds = 0.0;
  double weight_half_seconds = 0.0;
  // (Timed alone, then scaled by the chain's backward over the lone one.)
  // One optimizer step of its parameters as a stage takes it (ProfileOptions::optimizer): the
  // update check's sum of squares over the gradients, the update and the zeroing of the
  // gradients. 0: not measured (no optimizer given, or no parameters).
  double optimizer_seconds = 0.0;
  // The chain's forward and backward again while other ranks' work runs beside it
  // (ProfileOptions::co_runners): ops that share the host's caches and memory bandwidth run slower
  // than alone. 0: not measured.
  double co_run_forward_seconds = 0.0;
  double co_run_backward_seconds = 0.0;
  std::int64_t input_bytes = 0;     // the activation it receives, per micro-batch
  std::int64_t output_bytes = 0;    // boundary activation per micro-batch
  std::int64_t stash_bytes = 0;     // what its Context keeps per micro-batch (the input included when kept)
  // The parts of stash_bytes that are its input and its output (0 when the Context does not keep
  // them). In a model the output of one layer is the next one's input: where the first keeps its
  // output and the next its input, the two stashes hold one tensor, counted once in a piece.
  std::int64_t kept_input_bytes = 0;
  std::int64_t kept_output_bytes = 0;
  bool output_views_input = false;  // its output is its input's storage (a reshape): one tensor, not two
  // What its Context keeps after backward_input until backward_weight (zero-bubble schedules run
  // the two halves apart): each parameterised layer's output gradient and the inputs its weight
  // gradients need, the tensors counted whole (the incoming gradient included when kept). Its
  // input and output among them, as above (a layer done with its input half has usually let go
  // of both).
  std::int64_t weight_half_bytes = 0;
  std::int64_t weight_half_kept_input_bytes = 0;
  std::int64_t weight_half_kept_output_bytes = 0;
  // The most allocated while its input half runs on a Context (its input and output no longer
  // referenced but by the Context): what the Context keeps, the incoming gradient, the working set
  // and the input gradient it returns.
  std::int64_t input_half_peak_bytes = 0;
  std::int64_t workspace_bytes = 0; // peak memory of one forward+backward beyond its input and stash
  std::int64_t param_bytes = 0;
  std::int64_t buffer_bytes = 0;    // non-trained state (batch-norm running statistics)
  // Each tensor on its own (the allocator rounds every block): F32 bytes of every parameter, of
  // those that get a 16-bit compute copy under mixed precision (convolution and linear weights),
  // and of every buffer.
  std::vector<std::int64_t> parameter_tensor_bytes;
  std::vector<std::int64_t> copied_tensor_bytes;
  std::vector<std::int64_t> buffer_tensor_bytes;
};

struct ProfileOptions {
  std::int64_t micro_batch_size = 1;
  int repeats = 3;                  // timed runs after one warm-up
  std::uint64_t seed = 0;
  // The job's optimizer: each layer's step is timed too (LayerProfile::optimizer_seconds).
  std::optional<models::OptimizerConfig> optimizer;
  // The chain that times the layers holds at most about this many bytes of weights, gradients,
  // stashes and workspace at once (from the lone runs' figures); longer models are timed in
  // consecutive windows, each one's first layer fed a random input.
  std::int64_t chain_window_bytes = std::int64_t{1} << 30;
  // Micro-batches the chain forwards before the first one goes back (oldest first). With 2 or
  // more, every op finds its data colder in the caches than with 1 (forward then straight back):
  // resnet50's layers at micro-batch 4 took 8-12% longer with 2 and no longer with 4 or 8.
  // micro_batches_in_flight_of gives a job's.
  int micro_batches_in_flight = 1;
  // CPU devices: threads that run the same chain on CPU devices of their own (the profiled device's
  // index + 1, + 2, ...), as the other ranks of a job on this host would, while each chain is timed
  // a second time (LayerProfile::co_run_*). On a 2-core VM, vgg16's layers at width 8 ran 7-40%
  // slower beside one such thread and resnet50's no slower. 0: not timed so. Each co-runner
  // holds its own copy of the chain (up to chain_window_bytes) and builds its layers from the
  // model's LayerSpecs on its own thread: their factories must be safe to call concurrently.
  // The copies together stay within half the host's available memory (chain_window_bytes_for).
  int co_runners = 0;
  // The chain's timed passes go on past `repeats` until they add up to at least this long (at
  // most 1000 passes): a layer's time moves by up to 30% from one tenth of a second to the next on
  // a shared VM, and resnet18's 3 passes at micro-batch 1 took 12 ms in all, so two plans in a
  // row profiled it 55% apart while its jobs ran within 15% of each other. 0: `repeats` passes.
  double min_chain_seconds = 0.0;
};

// What a job's profile should use: 2 when it runs 2 or more micro-batches a step, else 1. For the
// whole job, not by stage: in the traces every stage of such a job ran its ops as slowly as the
// chain with 2 in flight, the last stage of a 1F1B or ZB-H1 pipeline too, which takes each
// micro-batch forward and straight back but between them receives, sends and runs the others.
int micro_batches_in_flight_of(int micro_batches);

// Options that time a job's layers at `micro_batch_size` as the job runs them, `micro_batches` a
// step (micro_batches_in_flight_of); the rest at their defaults.
ProfileOptions job_profile_options(std::int64_t micro_batch_size, int micro_batches);

// Builds each layer alone on `device`, feeds a random input of the shape the layers before it
// produce, and measures its memory; then times forward and backward with the layers in chains. Uses the device's allocator statistics for memory, so
// nothing else should allocate on `device` meanwhile.
std::vector<LayerProfile> profile_layers(const ModelDescription& model, kernels::Device device,
                                         const ProfileOptions& options);
std::vector<LayerProfile> profile_layers(const ModelDescription& model, kernels::Device device,
                                         std::int64_t micro_batch_size, int repeats);

// The runs of consecutive layers [begin, end) that profile_layers times as chains: each as long as
// its layers' weights, gradients, working sets, and stashes and outputs of each micro-batch in
// flight (from the lone runs) stay within `window_bytes`; a layer over it alone.
std::vector<std::pair<std::size_t, std::size_t>> chain_windows(const std::vector<LayerProfile>& profiles,
                                                               std::int64_t window_bytes, int micro_batches_in_flight = 1);

// Each layer's median time (times[i]: layer i's runs, the k-th of every layer from one micro-batch
// of one pass), scaled so that they add up to the median of the chain's totals (the k-th runs of
// all layers added up), as profile_layers gives a chain's layers. Layers with different counts of
// runs are read up to the fewest.
std::vector<double> medians_adding_up_to_the_median_total(const std::vector<std::vector<double>>& times);

// The window profile_layers times its chains in: options.chain_window_bytes, but on a CPU device
// the chain and its co-runners' copies (1 + co_runners of them) together within half of
// `available_host_bytes` (host_available_memory_bytes; 0: unknown, no bound), that bound rounded
// down to a power of two. At least 1 byte: a layer over the window is still timed alone.
std::int64_t chain_window_bytes_for(const ProfileOptions& options, kernels::Device device,
                                    std::int64_t available_host_bytes);

// Layer input shapes for a micro-batch of `micro_batch_size`, by chaining output_shape (entry i is
// layer i's input; the last entry is the model's output).
std::vector<kernels::Shape> layer_shapes(const ModelDescription& model, std::int64_t micro_batch_size);

}  // namespace pw::partition
