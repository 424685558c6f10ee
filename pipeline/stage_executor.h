#pragma once
// The stage executor: owns one stage's model chunks, its per-micro-batch contexts and its
// optimizer, and runs the stage's instruction list for a mini-batch, one handler per instruction
// kind, talking to neighbouring stages through a Transport.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <memory>
#include <set>
#include <vector>

#include "models/layers/sequential.h"
#include "models/loss.h"
#include "models/optimizer.h"
#include "pipeline/gradient_sync.h"
#include "pipeline/recompute.h"
#include "pipeline/remote_rows_sync.h"
#include "pipeline/flight_recorder.h"
#include "pipeline/schedule.h"
#include "pipeline/input_stager.h"
#include "pipeline/optimistic_update.h"
#include "pipeline/stage_tracer.h"
#include "pipeline/update_check.h"
#include "rpc/transport.h"

namespace pw::pipeline {

// One weight shared by layers on several stages: the stage's local parameters in the group
// (possibly none) and the stages owning a member. Gradients are summed over all owners before
// the optimizer step, in stage order, so every copy stays bit-identical.
struct TiedGroup {
  std::vector<models::Parameter*> local;   // this stage's members
  std::vector<int> owner_stages;           // ascending
};

struct StageConfig {
  ScheduleSpec spec;
  int stage = 0;
  kernels::Device device;
  // The instructions this stage runs every step. Empty: default_program(spec, stage, recompute).
  // A program given here runs as it is (`recompute` is then unused): a forward drops its context
  // exactly when the program holds a Recompute of its (micro-batch, chunk).
  std::vector<Instruction> program;
  RecomputeMode recompute = RecomputeMode::None;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // What the executor calls in its optimizer step, owned by its builder, which keeps them alive
  // while the executor lives (declare them before it).
  GradientSync* gradient_sync = nullptr;   // replicas of this stage to average gradients with, if any
  RemoteRowsSync* remote_rows = nullptr;   // this stage's rows on parameter servers, if any
  UpdateCheck* update_check = nullptr;     // whether each step updates; none: every step does, unscaled
  // Whether the stage waits for the update check's verdict before it updates, or updates at once
  // and undoes the update when the verdict differs; Auto: by the schedule (post_validates).
  UpdateValidation update_validation = UpdateValidation::Auto;
  int replica = 0;                         // for trace spans
  // Called before each instruction with the step: tests make a stage stall here (train/fault_injection.h).
  std::function<void(std::int64_t step, const Instruction&)> before_instruction;
  models::Loss loss;   // the last stage's
};

// What the first virtual stage feeds and the last one scores, per micro-batch, on the CPU.
struct MicroBatchInputs {
  std::vector<kernels::Tensor> images;
  std::vector<kernels::Tensor> labels;
};

struct StageStepResult {
  double loss_sum = 0.0;       // sum over samples of this stage's losses (last stage only)
  std::int64_t correct = 0;
  std::int64_t samples = 0;
  double busy_seconds = 0.0;   // compute instructions
  // Sends, the all-reduce's exposed wait (ReduceGrads) and received tensors' copies onto the
  // device; not the waits for a neighbour's message (those are the bubble).
  double communication_seconds = 0.0;
  std::int64_t boundary_bytes = 0;   // activations and gradients this stage sent to its neighbours
  double wall_seconds = 0.0;
  // Measured seconds per (op kind, chunk), summed over the step's micro-batches: what the
  // simulator needs to predict this step. For receives, the copy onto this stage's device.
  std::map<std::pair<OpType, int>, double> op_seconds;
};

class StageExecutor {
 public:
  // chunks[c] is this stage's model chunk c (virtual stage virtual_stage(spec, stage, c)).
  StageExecutor(StageConfig config, std::vector<std::unique_ptr<models::Sequential>> chunks,
                models::OptimizerConfig optimizer, rpc::Transport& transport, std::vector<TiedGroup> tied = {});

  StageStepResult run_step(std::int64_t step, const MicroBatchInputs& inputs);
  // Tells the transport the step this stage is on before any peer may send for it (the job's
  // first step, or the step a restore goes back to); run_step tells it each step's own.
  void begin_step(std::int64_t step);

  models::Sequential& chunk(int c) { return *chunks_.at(static_cast<std::size_t>(c)); }
  int chunk_count() const { return static_cast<int>(chunks_.size()); }
  const StageConfig& config() const { return config_; }   // config().program: what each step runs
  // fp16 loss scaling: the loss gradient is multiplied by `scale` (the update check unscales).
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  models::Optimizer& optimizer() { return *optimizer_; }
  // The last step's verdict (Apply when no check is set).
  UpdateDecision last_update() const { return last_update_; }
  std::vector<models::Parameter*> parameters();   // every chunk's, in model order
  // The next step's inputs (the first stage's micro-batches), given before run_step of the
  // current one: the remote rows they will look up start coming. Other stages ignore it.
  void prefetch_remote(const std::vector<kernels::Tensor>& next_micro_batches);
  // Waits for every send of remote gradients still in flight (RemoteRowsSync::flush).
  void flush_remote();
  // The last instructions this stage ran or is running (read from any thread).
  const FlightRecorder& flight_recorder() const { return flight_; }

 private:
  std::vector<rpc::ExpectedFrame> expected_frames() const;   // the pipeline frames one step takes
  struct MicroBatchState {
    kernels::Tensor input;        // received (or fed) activation
    kernels::Tensor output;       // activation to send
    kernels::Tensor grad_output;  // gradient w.r.t. the output (received, or the loss gradient)
    kernels::Tensor grad_input;   // gradient to send back
    std::unique_ptr<models::Context> ctx;
  };
  using Handler = void (StageExecutor::*)(const Instruction&);

  void recv_activation(const Instruction& in);
  void send_activation(const Instruction& in);
  void recv_gradient(const Instruction& in);
  void send_gradient(const Instruction& in);
  void forward(const Instruction& in);
  void backward(const Instruction& in);
  void backward_input(const Instruction& in);
  void backward_weight(const Instruction& in);
  void recompute(const Instruction& in);
  void reduce_grads(const Instruction& in);
  void optimizer_step(const Instruction& in);
  // The update check's verdict, with the dense update made before it when validating after.
  UpdateDecision validated_update(const std::vector<models::Parameter*>& params, const std::optional<UpdateShare>& share);

  MicroBatchState& state(const Instruction& in);
  // Runs a backward (or its weight half) of `in`; on the chunk's last one of the step, reports
  // each child layer's gradients final to the gradient sync as soon as they are.
  template <typename Body>
  void with_final_gradients(const Instruction& in, std::size_t index, Body body);
  kernels::Tensor received(const kernels::Tensor& t, const Instruction& in);
  std::uint64_t record_start(std::int64_t step, const Instruction& in);
  void run_forward(const Instruction& in, models::Mode mode);
  models::Context& context_for_backward(const Instruction& in);
  int virtual_stage_of(const Instruction& in) const { return virtual_stage(config_.spec, config_.stage, in.chunk); }
  int stage_of_virtual(int v) const { return locate_virtual_stage(config_.spec, v).stage; }
  // Sends to this stage itself (a V schedule's turn from chunk 0 to chunk 1 on the last stage)
  // stay in `loopback_`; a receive finds them there or fails at once (the program is out of order).
  void send_to(int v, const rpc::Tag& tag, const kernels::Tensor& t);
  kernels::Tensor recv_from(int v, const rpc::Tag& tag);
  bool first_virtual(const Instruction& in) const { return virtual_stage_of(in) == 0; }
  bool last_virtual(const Instruction& in) const;
  rpc::Deadline deadline() const { return std::chrono::steady_clock::now() + config_.timeout; }
  std::string describe(const Instruction& in) const;

  StageConfig config_;
  StageTracer tracer_;
  FlightRecorder flight_;
  std::int64_t message_bytes_ = 0;   // of the instruction running, for its flight entry
  std::vector<std::unique_ptr<models::Sequential>> chunks_;
  std::unique_ptr<models::Optimizer> optimizer_;
  rpc::Transport& transport_;
  std::vector<TiedGroup> tied_;
  double loss_scale_ = 1.0;
  UpdateDecision last_update_;
  OptimisticUpdate optimistic_;   // post-validation: the update made before the verdict
  std::set<std::pair<int, int>> recomputed_;     // (micro_batch, chunk) with a Recompute in the program
  std::vector<std::size_t> last_gradient_op_;   // per chunk: index of its last backward/weight op

  // Per step:
  std::int64_t step_ = 0;
  const MicroBatchInputs* inputs_ = nullptr;
  InputStager image_stager_;   // the first virtual stage's inputs on its device
  InputStager label_stager_;   // the last virtual stage's labels
  std::int64_t mini_batch_size_ = 1;   // the loss gradient is scaled by 1/mini_batch_size_
  std::map<std::pair<int, int>, MicroBatchState> states_;   // (micro_batch, chunk)
  std::map<std::tuple<int, int, int>, kernels::Tensor> loopback_;  // (micro-batch, kind, virtual stage) sent to itself
  std::size_t current_index_ = 0;               // of the instruction running
  StageStepResult result_;
};

}  // namespace pw::pipeline
