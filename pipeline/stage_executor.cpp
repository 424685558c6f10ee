#include "pipeline/stage_executor.h"

#include <algorithm>
#include <array>
#include <optional>
#include <sstream>

#include "core/clock.h"
#include "kernels/allocator.h"
#include "kernels/ops/elementwise.h"
#include "models/forward_key.h"
#include "models/loss.h"
#include "models/rng.h"
#include "pipeline/error_context.h"
#include "pipeline/program_check.h"

namespace pw::pipeline {
namespace {

constexpr std::size_t kOpCount = static_cast<std::size_t>(OpType::OptimizerStep) + 1;

// The span an instruction records (receives record their wait and their copy themselves).
std::optional<trace::SpanKind> span_of(OpType op) {
  switch (op) {
    case OpType::Forward: return trace::SpanKind::Forward;
    case OpType::Backward: return trace::SpanKind::Backward;
    case OpType::BackwardInput: return trace::SpanKind::BackwardInput;
    case OpType::BackwardWeight: return trace::SpanKind::BackwardWeight;
    case OpType::Recompute: return trace::SpanKind::Recompute;
    case OpType::OptimizerStep: return trace::SpanKind::OptimizerStep;
    case OpType::SendActivation:
    case OpType::SendGradient: return trace::SpanKind::Send;
    case OpType::ReduceGrads: return trace::SpanKind::AllReduce;
    default: return std::nullopt;
  }
}

bool is_compute(OpType op) {
  switch (op) {
    case OpType::Forward:
    case OpType::Backward:
    case OpType::BackwardInput:
    case OpType::BackwardWeight:
    case OpType::Recompute:
    case OpType::OptimizerStep: return true;
    default: return false;
  }
}

// What the memory an instruction allocates counts as: forward contexts, outputs and the gradients
// flowing back are activations; received copies and all-reduce buffers communication.
kernels::MemoryKind memory_kind_of(OpType op) {
  switch (op) {
    case OpType::RecvActivation:
    case OpType::SendActivation:
    case OpType::RecvGradient:
    case OpType::SendGradient:
    case OpType::ReduceGrads: return kernels::MemoryKind::Communication;
    case OpType::OptimizerStep: return kernels::MemoryKind::Workspace;
    default: return kernels::MemoryKind::Activations;
  }
}

}  // namespace

StageExecutor::StageExecutor(StageConfig config, std::vector<std::unique_ptr<models::Sequential>> chunks,
                             models::OptimizerConfig optimizer, rpc::Transport& transport, std::vector<TiedGroup> tied)
    : config_(std::move(config)),
      tracer_(config_.device, config_.stage, config_.replica),
      chunks_(std::move(chunks)),
      transport_(transport),
      tied_(std::move(tied)),
      image_stager_(config_.device),
      label_stager_(config_.device) {
  validate(config_.spec);
  PW_CHECK(static_cast<int>(chunks_.size()) == config_.spec.chunks,
           "stage " << config_.stage << " has " << chunks_.size() << " chunks, the schedule needs " << config_.spec.chunks);
  auto& program = config_.program;
  if (program.empty()) program = default_program(config_.spec, config_.stage, config_.recompute);
  check_stage_program(config_.spec, config_.stage, program);
  last_gradient_op_.assign(chunks_.size(), program.size());
  for (std::size_t i = 0; i < program.size(); ++i) {
    const Instruction& in = program[i];
    if (in.op == OpType::Recompute) recomputed_.insert({in.micro_batch, in.chunk});
    if (in.op == OpType::Backward || in.op == OpType::BackwardWeight)
      last_gradient_op_.at(static_cast<std::size_t>(in.chunk)) = i;
  }
  std::vector<models::Parameter*> params;
  for (auto& c : chunks_) {
    c->to(config_.device);
    for (auto* p : c->parameters()) params.push_back(p);
  }
  const auto share = config_.gradient_sync ? config_.gradient_sync->update_share() : std::nullopt;
  if (share) {
    // Sharded optimizer state: this replica updates, and keeps state for, its slices and the
    // parameters reduced whole.
    optimizer_ = std::make_unique<models::Optimizer>(std::move(params), share->whole, share->owned, optimizer);
    // The weights of the last update arrive bucket by bucket while the next step starts: each
    // child layer waits for its own before its forward (evaluation's too).
    for (auto& c : chunks_)
      c->set_forward_hook([this](const std::string& name, models::Layer& child) {
        config_.gradient_sync->await_weights(child, name, deadline());
      });
  } else {
    optimizer_ = std::make_unique<models::Optimizer>(std::move(params), optimizer);
  }
  config_.update_validation = resolve_update_validation(config_.update_validation, config_.spec.kind, optimizer.offload);
  transport_.expect_frames(expected_frames());
}

std::vector<rpc::ExpectedFrame> StageExecutor::expected_frames() const {
  std::vector<rpc::ExpectedFrame> frames;
  for (const Instruction& in : config_.program) {
    const bool activation = in.op == OpType::RecvActivation;
    if (!activation && in.op != OpType::RecvGradient) continue;
    const int v = virtual_stage_of(in);
    const int peer = stage_of_virtual(activation ? v - 1 : v + 1);
    if (peer == config_.stage) continue;   // kept in loopback_, never on a transport
    frames.push_back({peer, in.micro_batch, activation ? rpc::PayloadKind::Activation : rpc::PayloadKind::Gradient, v});
  }
  for (std::size_t g = 0; g < tied_.size(); ++g) {
    if (tied_[g].local.empty()) continue;
    for (int owner : tied_[g].owner_stages)
      if (owner != config_.stage) frames.push_back({owner, static_cast<int>(g), rpc::PayloadKind::TiedGradient, owner});
  }
  return frames;
}

void StageExecutor::begin_step(std::int64_t step) { transport_.begin_step(step); }

std::vector<models::Parameter*> StageExecutor::parameters() {
  std::vector<models::Parameter*> out;
  for (auto& c : chunks_)
    for (auto* p : c->parameters()) out.push_back(p);
  return out;
}

bool StageExecutor::last_virtual(const Instruction& in) const {
  return virtual_stage_of(in) == config_.spec.stages * config_.spec.chunks - 1;
}

std::string StageExecutor::describe(const Instruction& in) const {
  std::ostringstream out;
  out << "stage " << config_.stage << " (" << config_.device.str() << "), step " << step_ << ", instruction "
      << instruction_text(in, config_.spec.chunks);
  if (in.micro_batch >= 0) out << " (micro-batch " << in.micro_batch << ", chunk " << in.chunk << ")";
  out << ": ";
  return out.str();
}

StageExecutor::MicroBatchState& StageExecutor::state(const Instruction& in) { return states_[{in.micro_batch, in.chunk}]; }

StageStepResult StageExecutor::run_step(std::int64_t step, const MicroBatchInputs& inputs) {
  static const std::array<Handler, kOpCount> handlers = [] {
    std::array<Handler, kOpCount> h{};
    h[static_cast<std::size_t>(OpType::Forward)] = &StageExecutor::forward;
    h[static_cast<std::size_t>(OpType::Backward)] = &StageExecutor::backward;
    h[static_cast<std::size_t>(OpType::BackwardInput)] = &StageExecutor::backward_input;
    h[static_cast<std::size_t>(OpType::BackwardWeight)] = &StageExecutor::backward_weight;
    h[static_cast<std::size_t>(OpType::RecvActivation)] = &StageExecutor::recv_activation;
    h[static_cast<std::size_t>(OpType::SendActivation)] = &StageExecutor::send_activation;
    h[static_cast<std::size_t>(OpType::RecvGradient)] = &StageExecutor::recv_gradient;
    h[static_cast<std::size_t>(OpType::SendGradient)] = &StageExecutor::send_gradient;
    h[static_cast<std::size_t>(OpType::Recompute)] = &StageExecutor::recompute;
    h[static_cast<std::size_t>(OpType::ReduceGrads)] = &StageExecutor::reduce_grads;
    h[static_cast<std::size_t>(OpType::OptimizerStep)] = &StageExecutor::optimizer_step;
    return h;
  }();
  PW_CHECK(static_cast<int>(inputs.images.size()) == config_.spec.micro_batches &&
               static_cast<int>(inputs.labels.size()) == config_.spec.micro_batches,
           "stage " << config_.stage << ": " << inputs.images.size() << " micro-batches of inputs for a schedule of "
                    << config_.spec.micro_batches);
  step_ = step;
  transport_.begin_step(step);
  inputs_ = &inputs;
  image_stager_.stage(inputs.images);
  label_stager_.stage(inputs.labels);
  // However the step ends, the next one's copies wait until the device is past this one's uses.
  struct Release {
    StageExecutor& e;
    ~Release() {
      e.image_stager_.release();
      e.label_stager_.release();
    }
  } release{*this};
  mini_batch_size_ = 0;
  for (const auto& labels : inputs.labels) mini_batch_size_ += labels.numel();
  states_.clear();
  loopback_.clear();
  result_ = {};
  // Mixed precision: the 16-bit weight copies follow whatever changed the weights since the last step.
  for (auto& c : chunks_) c->refresh_compute_copies();
  const auto& schedule = config_.program;
  if (config_.gradient_sync != nullptr) config_.gradient_sync->start_step(step);
  tracer_.begin_step(step);
  const auto start = Clock::now();
  for (current_index_ = 0; current_index_ < schedule.size(); ++current_index_) {
    const Instruction& in = schedule[current_index_];
    const auto index = static_cast<std::size_t>(in.op);
    const Handler handler = index < handlers.size() ? handlers[index] : nullptr;
    PW_CHECK(handler != nullptr, "stage " << config_.stage << ": no handler for instruction kind " << index);
    const auto t0 = Clock::now();
    const auto kind = span_of(in.op);
    const auto span = kind ? tracer_.begin(*kind, in.micro_batch, in.chunk) : StageTracer::Token{};
    const auto flight = record_start(step, in);
    message_bytes_ = 0;
    try {
      if (config_.before_instruction) config_.before_instruction(step, in);
      kernels::MemoryKindScope memory_kind(memory_kind_of(in.op));
      (this->*handler)(in);
    } catch (...) {
      flight_.finish(flight, FlightState::Failed, message_bytes_);
      rethrow_with_context(describe(in));
    }
    flight_.finish(flight, FlightState::Done, message_bytes_);
    if (kind) tracer_.end(span);
    if (is_compute(in.op)) {
      const double dt = seconds_since(t0);
      result_.busy_seconds += dt;
      result_.op_seconds[{in.op, in.chunk}] += dt;
    } else if (in.op != OpType::RecvActivation && in.op != OpType::RecvGradient) {
      result_.communication_seconds += seconds_since(t0);
    }
  }
  PW_CHECK(states_.empty(), "stage " << config_.stage << ": " << states_.size()
                                     << " micro-batch states left after the step; the schedule is incomplete");
  result_.wall_seconds = seconds_since(start);
  tracer_.end_step();
  inputs_ = nullptr;
  return result_;
}

std::uint64_t StageExecutor::record_start(std::int64_t step, const Instruction& in) {
  int peer = -1, message_to = -1;
  const int v = in.op == OpType::ReduceGrads || in.op == OpType::OptimizerStep ? -1 : virtual_stage_of(in);
  const int pieces = config_.spec.stages * config_.spec.chunks;
  auto stage_of = [&](int piece) { return piece < 0 || piece >= pieces ? -1 : stage_of_virtual(piece); };
  switch (in.op) {
    case OpType::RecvActivation: peer = stage_of(v - 1), message_to = v; break;
    case OpType::SendActivation: peer = stage_of(v + 1), message_to = v + 1; break;
    case OpType::RecvGradient: peer = stage_of(v + 1), message_to = v; break;
    case OpType::SendGradient: peer = stage_of(v - 1), message_to = v - 1; break;
    default: break;
  }
  return flight_.start(step, in, static_cast<int>(current_index_), peer, message_to);
}

void StageExecutor::run_forward(const Instruction& in, models::Mode mode) {
  auto& st = state(in);
  const kernels::Tensor x =
      first_virtual(in) ? image_stager_.take(in.micro_batch) : st.input;
  PW_CHECK(x.defined(), "no input activation (was RecvActivation scheduled before this forward?)");
  models::ForwardKeyGuard key(models::splitmix64(static_cast<std::uint64_t>(step_) * 1000003u +
                                                 static_cast<std::uint64_t>(in.micro_batch)));
  auto out = chunk(in.chunk).forward(x, mode);
  if (mode == models::Mode::Train) {
    if (last_virtual(in)) {
      const auto labels = label_stager_.take(in.micro_batch);
      auto loss = models::compute_loss(config_.loss, out.y, labels,
                                       loss_scale_ / static_cast<double>(mini_batch_size_));
      const auto n = labels.numel();
      result_.loss_sum += loss.loss * static_cast<double>(n);
      result_.correct += loss.correct;
      result_.samples += n;
      st.grad_output = std::move(loss.grad_logits);
    } else {
      st.output = out.y;
    }
  }
  if (mode == models::Mode::Train && recomputed_.contains({in.micro_batch, in.chunk})) {
    st.input = x;   // all its Recompute needs; the context goes
  } else {
    st.ctx = std::move(out.ctx);
    st.input = kernels::Tensor();
  }
}

models::Context& StageExecutor::context_for_backward(const Instruction& in) {
  auto& st = state(in);
  if (st.ctx) return *st.ctx;
  if (recomputed_.contains({in.micro_batch, in.chunk})) {
    const std::string rebuild = instruction_text({OpType::Recompute, in.micro_batch, in.chunk}, config_.spec.chunks);
    PW_FAIL("no forward context: the forward dropped it for " << rebuild << ", which has not run yet; the program "
                                                              << "must run " << rebuild << " before this backward");
  }
  PW_FAIL("no forward context (was its Forward scheduled before this backward?)");
}

void StageExecutor::forward(const Instruction& in) { run_forward(in, models::Mode::Train); }

void StageExecutor::recompute(const Instruction& in) {
  const auto& st = state(in);
  PW_CHECK(!st.ctx && st.input.defined(),
           (st.ctx ? "the forward context is already there" : "nothing to recompute from: the forward has not run")
               << " (a Recompute runs between its Forward and its backward)");
  run_forward(in, models::Mode::Recompute);
}

template <typename Body>
void StageExecutor::with_final_gradients(const Instruction& in, std::size_t index, Body body) {
  GradientSync* sync = config_.gradient_sync;
  if (sync == nullptr || index != last_gradient_op_.at(static_cast<std::size_t>(in.chunk))) {
    body();
    return;
  }
  auto& c = chunk(in.chunk);
  c.set_backward_hook([sync](models::Layer& child) {
    for (auto* p : child.parameters()) sync->ready(p);
  });
  struct ClearHook {
    models::Sequential& c;
    ~ClearHook() { c.set_backward_hook({}); }
  } clear{c};
  body();
  for (auto* p : c.parameters()) sync->ready(p);   // any parameter held by the chunk itself
}

void StageExecutor::backward(const Instruction& in) {
  models::Context& ctx = context_for_backward(in);
  auto& st = state(in);
  PW_CHECK(st.grad_output.defined(), "no output gradient (was RecvGradient scheduled before this backward?)");
  kernels::Tensor grad_input;
  with_final_gradients(in, current_index_, [&] { grad_input = chunk(in.chunk).backward(ctx, st.grad_output); });
  st.ctx.reset();
  st.grad_output = kernels::Tensor();
  st.input = kernels::Tensor();
  if (first_virtual(in)) states_.erase({in.micro_batch, in.chunk});
  else st.grad_input = std::move(grad_input);
}

void StageExecutor::backward_input(const Instruction& in) {
  models::Context& ctx = context_for_backward(in);
  auto& st = state(in);
  PW_CHECK(st.grad_output.defined(), "no output gradient (was RecvGradient scheduled before this backward?)");
  kernels::Tensor grad_input = chunk(in.chunk).backward_input(ctx, st.grad_output);
  st.grad_output = kernels::Tensor();
  st.input = kernels::Tensor();
  if (!first_virtual(in)) st.grad_input = std::move(grad_input);
}

void StageExecutor::backward_weight(const Instruction& in) {
  auto& st = state(in);
  PW_CHECK(st.ctx != nullptr, "weight-gradient half before its input-gradient half");
  with_final_gradients(in, current_index_, [&] { chunk(in.chunk).backward_weight(*st.ctx); });
  st.ctx.reset();
  if (!st.grad_input.defined()) states_.erase({in.micro_batch, in.chunk});
}

void StageExecutor::recv_activation(const Instruction& in) {
  const int v = virtual_stage_of(in);
  const rpc::Tag tag{step_, in.micro_batch, rpc::PayloadKind::Activation, v};
  const auto wait = tracer_.begin(trace::SpanKind::RecvWait, in.micro_batch, in.chunk);
  auto arrived = recv_from(v - 1, tag);
  tracer_.end(wait);
  state(in).input = received(arrived, in);
}

void StageExecutor::send_activation(const Instruction& in) {
  const int v = virtual_stage_of(in);
  auto& st = state(in);
  PW_CHECK(st.output.defined(), "no activation to send (was Forward scheduled before it?)");
  send_to(v + 1, {step_, in.micro_batch, rpc::PayloadKind::Activation, v + 1}, st.output);
  result_.boundary_bytes += static_cast<std::int64_t>(st.output.nbytes());
  message_bytes_ = static_cast<std::int64_t>(st.output.nbytes());
  st.output = kernels::Tensor();
}

void StageExecutor::recv_gradient(const Instruction& in) {
  const int v = virtual_stage_of(in);
  const rpc::Tag tag{step_, in.micro_batch, rpc::PayloadKind::Gradient, v};
  const auto wait = tracer_.begin(trace::SpanKind::RecvWait, in.micro_batch, in.chunk);
  auto arrived = recv_from(v + 1, tag);
  tracer_.end(wait);
  state(in).grad_output = received(arrived, in);
}

void StageExecutor::send_to(int v, const rpc::Tag& tag, const kernels::Tensor& t) {
  const int peer = stage_of_virtual(v);
  if (peer != config_.stage) {
    transport_.send(peer, tag, t, deadline());
    return;
  }
  const auto [it, fresh] = loopback_.emplace(std::tuple{tag.micro_batch, static_cast<int>(tag.kind), tag.virtual_stage}, t);
  PW_CHECK(fresh, "sends micro-batch " << tag.micro_batch << " to itself twice");
}

kernels::Tensor StageExecutor::recv_from(int v, const rpc::Tag& tag) {
  const int peer = stage_of_virtual(v);
  if (peer != config_.stage) return transport_.recv(peer, tag, deadline());
  const auto it = loopback_.find({tag.micro_batch, static_cast<int>(tag.kind), tag.virtual_stage});
  PW_CHECK(it != loopback_.end(), "receives micro-batch " << tag.micro_batch
                                      << " from itself before sending it (the program must send it first)");
  kernels::Tensor t = std::move(it->second);
  loopback_.erase(it);
  return t;
}

kernels::Tensor StageExecutor::received(const kernels::Tensor& t, const Instruction& in) {
  // The copy onto this stage's device is the transfer; the wait before it is not.
  const auto t0 = Clock::now();
  const auto span = tracer_.begin(trace::SpanKind::Transfer, in.micro_batch, in.chunk);
  kernels::Tensor local = t.to(config_.device);
  tracer_.end(span);
  message_bytes_ = static_cast<std::int64_t>(t.nbytes());
  const double dt = seconds_since(t0);
  result_.op_seconds[{in.op, in.chunk}] += dt;
  result_.communication_seconds += dt;
  return local;
}

void StageExecutor::send_gradient(const Instruction& in) {
  const int v = virtual_stage_of(in);
  auto& st = state(in);
  PW_CHECK(st.grad_input.defined(), "no input gradient to send (was a backward scheduled before it?)");
  send_to(v - 1, {step_, in.micro_batch, rpc::PayloadKind::Gradient, v - 1}, st.grad_input);
  result_.boundary_bytes += static_cast<std::int64_t>(st.grad_input.nbytes());
  message_bytes_ = static_cast<std::int64_t>(st.grad_input.nbytes());
  st.grad_input = kernels::Tensor();
  if (!st.ctx) states_.erase({in.micro_batch, in.chunk});
}

void StageExecutor::reduce_grads(const Instruction&) {
  if (config_.gradient_sync != nullptr) config_.gradient_sync->finish(deadline());
  const auto share = config_.gradient_sync != nullptr && !tied_.empty() ? config_.gradient_sync->update_share()
                                                                        : std::nullopt;
  for (std::size_t g = 0; g < tied_.size(); ++g) {
    TiedGroup& group = tied_[g];
    if (group.local.empty()) continue;
    // What of each member this replica sums over the stages: the whole gradient, or with sharded
    // state the segment it owns (the same elements on every stage: each tied weight has a bucket
    // of its own; a replica owning none of it skips the tie on every stage alike).
    std::vector<kernels::Tensor> parts;
    for (auto* p : group.local) {
      if (!share || std::find(share->whole.begin(), share->whole.end(), p) != share->whole.end()) {
        parts.push_back(p->grad);
        continue;
      }
      const auto slice = std::find_if(share->owned.begin(), share->owned.end(),
                                      [&](const models::ParameterSlice& s) { return s.parameter == p; });
      if (slice != share->owned.end()) parts.push_back(p->grad.view(slice->offset, {slice->length}));
    }
    if (parts.size() != group.local.size()) continue;
    // This stage's contribution: its members' gradients added in order.
    kernels::Tensor mine = parts.front().clone();
    for (std::size_t i = 1; i < parts.size(); ++i) kernels::add_inplace(mine, parts[i]);
    const rpc::Tag out_tag{step_, static_cast<int>(g), rpc::PayloadKind::TiedGradient, config_.stage};
    for (int owner : group.owner_stages)
      if (owner != config_.stage) transport_.send(owner, out_tag, mine, deadline());
    // Every owner adds the contributions in stage order, so all copies end bit-identical.
    kernels::Tensor total;
    for (int owner : group.owner_stages) {
      kernels::Tensor part =
          owner == config_.stage
              ? mine
              : transport_.recv(owner, {step_, static_cast<int>(g), rpc::PayloadKind::TiedGradient, owner}, deadline())
                    .to(config_.device);
      if (!total.defined()) total = part.clone();
      else kernels::add_inplace(total, part);
    }
    for (auto& part : parts) part.copy_from(total);
  }
}

void StageExecutor::prefetch_remote(const std::vector<kernels::Tensor>& next_micro_batches) {
  if (config_.stage == 0 && config_.remote_rows != nullptr) config_.remote_rows->prefetch(next_micro_batches);
}

void StageExecutor::flush_remote() {
  if (config_.remote_rows != nullptr) config_.remote_rows->flush();
}

void StageExecutor::optimizer_step(const Instruction&) {
  const auto params = parameters();
  const auto share = config_.gradient_sync ? config_.gradient_sync->update_share() : std::nullopt;
  last_update_ = config_.update_check != nullptr ? validated_update(params, share) : UpdateDecision{};
  if (last_update_.action == UpdateAction::Skip) {
    optimizer_->zero_grad();
    // Nothing changed, but what travels with the weights (the batch-norm statistics) still goes.
    if (share) config_.gradient_sync->start_gathering_weights();
    if (config_.remote_rows) config_.remote_rows->finish_step(RemoteGradients::Discard);
    return;
  }
  if (last_update_.gradient_scale != 1.0 && config_.remote_rows)
    config_.remote_rows->scale_gradients(last_update_.gradient_scale);
  if (optimistic_.pending()) optimistic_.keep();
  else update_dense(*optimizer_, params, last_update_.gradient_scale);
  optimizer_->zero_grad();
  // Sharded optimizer state: the other replicas' updated slices start coming; the next step's
  // forward waits for each layer's (and anything reading weights between steps, for all).
  if (share) config_.gradient_sync->start_gathering_weights();
  if (config_.remote_rows) config_.remote_rows->finish_step(RemoteGradients::Push);
}

UpdateDecision StageExecutor::validated_update(const std::vector<models::Parameter*>& params,
                                               const std::optional<UpdateShare>& share) {
  // A tied weight's gradient is held (equal) by every member: the first member on the first
  // owner counts it once.
  std::set<models::Parameter*> not_counted;
  for (const auto& group : tied_) {
    if (group.local.empty()) continue;
    const bool first_owner = group.owner_stages.front() == config_.stage;
    not_counted.insert(group.local.begin() + (first_owner ? 1 : 0), group.local.end());
  }
  GradientShare counted;
  if (share) {
    // Sharded: the slices this replica owns hold their reduced gradients, nothing else does.
    for (const auto& slice : share->owned)
      if (!not_counted.count(slice.parameter)) counted.owned.push_back(slice);
    for (auto* p : share->whole)
      if (!not_counted.count(p)) counted.whole.push_back(p);
  } else {
    for (auto* p : params)
      if (!not_counted.count(p)) counted.whole.push_back(p);
  }
  const double remote_squares = config_.remote_rows ? config_.remote_rows->gradient_sum_of_squares() : 0.0;
  const UpdateDecision provisional = config_.update_check->report(step_, counted, remote_squares, result_.loss_sum);
  // Post-validation: update while the other ranks' figures travel (rows on parameter servers wait
  // for the verdict: what the servers apply cannot be taken back).
  if (config_.update_validation == UpdateValidation::After && provisional.action == UpdateAction::Apply)
    optimistic_.apply(*optimizer_, params, provisional.gradient_scale);
  UpdateDecision verdict;
  try {
    verdict = config_.update_check->verdict(step_);
  } catch (...) {
    if (optimistic_.pending()) optimistic_.undo(*optimizer_, params);
    throw;
  }
  if (optimistic_.pending() && verdict != provisional) optimistic_.undo(*optimizer_, params);
  return verdict;
}

}  // namespace pw::pipeline
