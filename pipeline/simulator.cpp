// Discrete-event simulation of per-stage instruction lists: each stage runs its list in order,
// sends are buffered, receives wait for the message's arrival. Besides timing it checks that the
// programs are a well-formed mini-batch (every message received, every backward after its
// forward, gradients final before ReduceGrads) and reports deadlocks stage by stage.
#include "pipeline/simulator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "core/error.h"

namespace pw::pipeline {

OpTimes OpTimes::uniform(const ScheduleSpec& spec, double f, double bi, double w) {
  const auto n = static_cast<std::size_t>(spec.stages * spec.chunks);
  OpTimes t;
  t.forward.assign(n, f);
  t.backward_input.assign(n, bi);
  t.backward_weight.assign(n, w);
  t.send_activation.assign(n, 0.0);
  t.send_gradient.assign(n, 0.0);
  return t;
}

ScheduleError::ScheduleError(const ScheduleSpec& spec, int stage, std::string detail)
    : Error("schedule " + schedule_kind_name(spec.kind) + ": " + detail), stage_(stage), detail_(std::move(detail)) {}

namespace {

enum class Payload { Activation, Gradient };

// A message is addressed to the virtual stage that receives it; the executor routes the same way.
struct MessageKey {
  Payload payload;
  int micro_batch;
  int to_virtual_stage;
  friend auto operator<=>(const MessageKey&, const MessageKey&) = default;
};

struct Message {
  double arrival;
  int from_stage;
  std::size_t from_instruction;
};

// What a stage has done for one (micro_batch, chunk).
struct UnitProgress {
  bool activation_received = false;
  bool forwarded = false;
  bool gradient_received = false;
  bool input_gradient_done = false;
  bool weight_gradient_done = false;
};

struct StageState {
  std::size_t next = 0;   // index of the next instruction
  double clock = 0.0;
  double busy = 0.0;
  bool grads_reduced = false;
  bool stepped = false;
  std::vector<UnitProgress> units;   // micro_batch * chunks + chunk
  std::vector<TimedOp> timeline;
};

std::string payload_name(Payload p) { return p == Payload::Activation ? "activation" : "gradient"; }


class Simulation {
 public:
  Simulation(const ScheduleSpec& spec, const std::vector<std::vector<Instruction>>& programs, const OpTimes& times)
      : spec_(spec), programs_(programs), times_(times), last_virtual_(spec.stages * spec.chunks - 1) {
    validate(spec);
    PW_CHECK(static_cast<int>(programs.size()) == spec.stages,
             "simulate: " << programs.size() << " programs for " << spec.stages << " stages");
    const auto n = static_cast<std::size_t>(spec.stages * spec.chunks);
    for (const auto* v : {&times.forward, &times.backward_input, &times.backward_weight, &times.send_activation,
                          &times.send_gradient})
      PW_CHECK(v->size() == n, "simulate: op times have " << v->size() << " entries; need one per virtual stage ("
                                                          << n << ")");
    PW_CHECK(times.forward_backward.empty() || static_cast<int>(times.forward_backward.size()) == spec.stages,
             "simulate: " << times.forward_backward.size() << " F&B times; need none or one per stage ("
                          << spec.stages << ")");
    stages_.resize(programs.size());
    for (StageState& st : stages_) st.units.resize(static_cast<std::size_t>(spec.micro_batches * spec.chunks));
  }

  SimulationResult run() {
    for (bool progressed = true; progressed;) {
      progressed = false;
      for (int s = 0; s < spec_.stages; ++s)
        while (try_execute_next(s)) progressed = true;
    }
    throw_if_deadlocked();
    throw_if_unfinished();
    return result();
  }

 private:
  StageState& state(int stage) { return stages_[static_cast<std::size_t>(stage)]; }
  const StageState& state(int stage) const { return stages_[static_cast<std::size_t>(stage)]; }
  const std::vector<Instruction>& program_of(int stage) const { return programs_[static_cast<std::size_t>(stage)]; }

  std::string quoted(const Instruction& in) const { return "'" + instruction_text(in, spec_.chunks) + "'"; }

  [[noreturn]] void fail(int stage, const std::string& why) const {
    const StageState& st = state(stage);
    throw ScheduleError(spec_, stage,
                        PW_DETAIL_MSG("stage " << stage << " instruction " << st.next << " "
                                               << quoted(program_of(stage)[st.next]) << ": " << why));
  }

  UnitProgress& unit(int stage, const Instruction& in) {
    const bool in_range = in.micro_batch >= 0 && in.micro_batch < spec_.micro_batches && in.chunk >= 0 &&
                          in.chunk < spec_.chunks;
    if (!in_range) {
      fail(stage, PW_DETAIL_MSG("micro-batch/chunk out of range (" << spec_.micro_batches << " micro-batches, "
                                                                    << spec_.chunks << " chunks)"));
    }
    return state(stage).units[static_cast<std::size_t>(in.micro_batch * spec_.chunks + in.chunk)];
  }

  // Executes stage's next instruction; false if it is finished or waits for a message.
  bool try_execute_next(int stage) {
    StageState& st = state(stage);
    const auto& program = program_of(stage);
    if (st.next >= program.size()) return false;
    const Instruction& in = program[st.next];
    const double start = st.clock;
    double compute = 0.0;
    const bool has_unit = in.op != OpType::ReduceGrads && in.op != OpType::OptimizerStep;
    const int v = has_unit ? virtual_stage_of(stage, in) : -1;
    switch (in.op) {
      case OpType::RecvActivation:
      case OpType::RecvGradient: {
        const bool activation = in.op == OpType::RecvActivation;
        UnitProgress& u = unit(stage, in);
        if (activation ? v == 0 : v == last_virtual_)
          fail(stage, PW_DETAIL_MSG("virtual stage " << v << " has no " << (activation ? "previous" : "next")
                                                   << " virtual stage"));
        bool& received = activation ? u.activation_received : u.gradient_received;
        if (received) fail(stage, "received twice");
        auto it = mailbox_.find({activation ? Payload::Activation : Payload::Gradient, in.micro_batch, v});
        if (it == mailbox_.end() || it->second.empty()) return false;
        st.clock = std::max(st.clock, it->second.front().arrival);
        it->second.pop_front();
        received = true;
        break;
      }
      case OpType::SendActivation:
      case OpType::SendGradient: {
        const bool activation = in.op == OpType::SendActivation;
        const UnitProgress& u = unit(stage, in);
        if (activation ? v == last_virtual_ : v == 0)
          fail(stage, PW_DETAIL_MSG("virtual stage " << v << " has no " << (activation ? "next" : "previous")
                                                   << " virtual stage"));
        if (activation ? !u.forwarded : !u.input_gradient_done)
          fail(stage, PW_DETAIL_MSG("sends before computing (no earlier " << (activation ? "forward" : "backward")
                                                                            << ")"));
        const double transfer = send_seconds(spec_, in, stage, times_);
        mailbox_[{activation ? Payload::Activation : Payload::Gradient, in.micro_batch, activation ? v + 1 : v - 1}]
            .push_back({st.clock + transfer, stage, st.next});
        break;
      }
      case OpType::Forward: {
        UnitProgress& u = unit(stage, in);
        if (v != 0 && !u.activation_received) fail(stage, "forward before its RecvActivation");
        if (u.forwarded) fail(stage, "second forward of the same micro-batch");
        u.forwarded = true;
        if (in.overlap == Overlap::WithNext) require_overlap_partner(stage);
        compute = compute_seconds(spec_, program_of(stage), st.next, stage, times_);
        break;
      }
      case OpType::Backward:
      case OpType::BackwardInput: {
        UnitProgress& u = unit(stage, in);
        if (!u.forwarded) fail(stage, "backward before its forward");
        if (v != last_virtual_ && !u.gradient_received) fail(stage, "backward before its RecvGradient");
        if (u.input_gradient_done) fail(stage, "second backward of the same micro-batch");
        u.input_gradient_done = true;
        if (in.op == OpType::Backward) u.weight_gradient_done = true;
        compute = compute_seconds(spec_, program_of(stage), st.next, stage, times_);   // 0 closing a pair
        break;
      }
      case OpType::BackwardWeight: {
        UnitProgress& u = unit(stage, in);
        if (!u.input_gradient_done) fail(stage, "weight gradient before its input gradient (Bi)");
        if (u.weight_gradient_done) fail(stage, "second weight gradient of the same micro-batch");
        u.weight_gradient_done = true;
        compute = compute_seconds(spec_, program_of(stage), st.next, stage, times_);
        break;
      }
      case OpType::Recompute: {
        const UnitProgress& u = unit(stage, in);
        if (!u.forwarded || u.input_gradient_done) fail(stage, "recompute outside forward..backward");
        compute = compute_seconds(spec_, program_of(stage), st.next, stage, times_);
        break;
      }
      case OpType::ReduceGrads: {
        throw_if_gradients_incomplete(stage);
        if (st.grads_reduced) fail(stage, "second ReduceGrads");
        st.grads_reduced = true;
        break;
      }
      case OpType::OptimizerStep: {
        if (!st.grads_reduced || st.stepped) fail(stage, "optimizer step needs exactly one ReduceGrads before it");
        st.stepped = true;
        compute = compute_seconds(spec_, program_of(stage), st.next, stage, times_);
        break;
      }
    }
    st.clock += compute;
    st.busy += compute;
    const bool pair_backward = (in.op == OpType::Backward || in.op == OpType::BackwardInput) &&
                               closes_overlapped_pair(stage);
    st.timeline.push_back({in, pair_backward ? st.timeline.back().start : start, st.clock});
    ++st.next;
    return true;
  }

  bool closes_overlapped_pair(int stage) const {
    const StageState& st = state(stage);
    return st.next > 0 && program_of(stage)[st.next - 1].overlap == Overlap::WithNext;
  }

  // An overlapped F&B pair starting at stage's next instruction: fails unless a backward follows it.
  void require_overlap_partner(int stage) {
    const StageState& st = state(stage);
    const auto& program = program_of(stage);
    const bool has_partner = st.next + 1 < program.size() && (program[st.next + 1].op == OpType::Backward ||
                                                              program[st.next + 1].op == OpType::BackwardInput);
    if (!has_partner) fail(stage, "an overlapped forward (&) must be followed right away by a backward (B or Bi)");
    unit(stage, program[st.next + 1]);   // range check of the partner, with context
  }

  int virtual_stage_of(int stage, const Instruction& in) {
    unit(stage, in);   // range check with context
    return virtual_stage(spec_, stage, in.chunk);
  }

  void throw_if_gradients_incomplete(int stage) {
    const StageState& st = state(stage);
    for (int m = 0; m < spec_.micro_batches; ++m) {
      for (int c = 0; c < spec_.chunks; ++c) {
        const UnitProgress& u = st.units[static_cast<std::size_t>(m * spec_.chunks + c)];
        if (!u.forwarded || !u.weight_gradient_done)
          fail(stage, PW_DETAIL_MSG("gradients are not final: micro-batch "
                                    << m << " chunk " << c << " has "
                                    << (!u.forwarded ? "no forward" : "no complete backward")));
      }
    }
  }

  // Where the sender of a message stands, for deadlock reports.
  std::string sender_status(const MessageKey& key) const {
    const int from_virtual = key.payload == Payload::Activation ? key.to_virtual_stage - 1 : key.to_virtual_stage + 1;
    const auto from = locate_virtual_stage(spec_, from_virtual);
    const int from_stage = from.stage;
    const Instruction send{key.payload == Payload::Activation ? OpType::SendActivation : OpType::SendGradient,
                           key.micro_batch, from.chunk};
    const StageState& sender = state(from_stage);
    const auto& program = program_of(from_stage);
    std::ostringstream out;
    out << "stage " << from_stage;
    const auto it = std::find(program.begin() + static_cast<std::ptrdiff_t>(sender.next), program.end(), send);
    if (it == program.end()) {
      out << " never sends it";
    } else {
      out << " sends it at instruction " << (it - program.begin()) << " " << quoted(send) << " but is ";
      if (sender.next < program.size())
        out << "at instruction " << sender.next << " " << quoted(program[sender.next]);
      else
        out << "finished";
    }
    return out.str();
  }

  void throw_if_deadlocked() const {
    std::ostringstream blocked;
    int count = 0, first_blocked = -1;
    for (int s = 0; s < spec_.stages; ++s) {
      const StageState& st = state(s);
      if (st.next >= program_of(s).size()) continue;
      const Instruction& in = program_of(s)[st.next];
      if (first_blocked < 0) first_blocked = s;
      const Payload payload = in.op == OpType::RecvActivation ? Payload::Activation : Payload::Gradient;
      const MessageKey key{payload, in.micro_batch, virtual_stage(spec_, s, in.chunk)};
      blocked << (count++ ? "; " : "") << "stage " << s << " waits at instruction " << st.next << " " << quoted(in)
              << " for the " << payload_name(payload) << " of micro-batch " << in.micro_batch << " chunk " << in.chunk
              << " (" << sender_status(key) << ")";
    }
    if (count > 0)
      throw ScheduleError(spec_, first_blocked,
                          PW_DETAIL_MSG("deadlocks (" << spec_.stages << " stages, " << spec_.micro_batches
                                                      << " micro-batches, " << spec_.chunks
                                                      << " chunks): " << blocked.str()));
  }

  void throw_if_unfinished() const {
    for (const auto& [key, queue] : mailbox_) {
      if (queue.empty()) continue;
      const Message& m = queue.front();
      throw ScheduleError(spec_, m.from_stage,
                          PW_DETAIL_MSG("stage " << m.from_stage << " instruction " << m.from_instruction << " "
                                                 << quoted(program_of(m.from_stage)[m.from_instruction])
                                                 << " sends a " << payload_name(key.payload) << " that virtual stage "
                                                 << key.to_virtual_stage << " (stage "
                                                 << locate_virtual_stage(spec_, key.to_virtual_stage).stage << ") never receives"));
    }
    for (int s = 0; s < spec_.stages; ++s)
      if (!state(s).stepped)
        throw ScheduleError(spec_, s, PW_DETAIL_MSG("stage " << s << " ends without ReduceGrads and OptimizerStep"));
  }

  SimulationResult result() {
    std::vector<StageRun> runs;
    for (StageState& st : stages_) runs.push_back({st.clock, st.busy, std::move(st.timeline)});
    return simulation_result(std::move(runs));
  }

  const ScheduleSpec& spec_;
  const std::vector<std::vector<Instruction>>& programs_;
  const OpTimes& times_;
  const int last_virtual_;
  std::vector<StageState> stages_;
  std::map<MessageKey, std::deque<Message>> mailbox_;
};

}  // namespace

SimulationResult simulation_result(std::vector<StageRun> stages) {
  SimulationResult r;
  double total_busy = 0.0;
  for (const StageRun& st : stages) r.makespan = std::max(r.makespan, st.finished);
  for (StageRun& st : stages) {
    r.stage_busy.push_back(st.busy);
    r.stage_busy_fraction.push_back(r.makespan > 0 ? st.busy / r.makespan : 0.0);
    total_busy += st.busy;
    r.timeline.push_back(std::move(st.timeline));
  }
  const auto count = static_cast<double>(stages.size());
  r.bubble_fraction = r.makespan > 0 ? 1.0 - total_busy / (count * r.makespan) : 0.0;
  return r;
}

double compute_seconds(const ScheduleSpec& spec, const std::vector<Instruction>& program, std::size_t index,
                       int stage, const OpTimes& times) {
  const Instruction& in = program[index];
  const auto v = static_cast<std::size_t>(virtual_stage(spec, stage, in.chunk));
  switch (in.op) {
    case OpType::Forward: {
      if (in.overlap != Overlap::WithNext) return times.forward[v];
      if (!times.forward_backward.empty()) return times.forward_backward[static_cast<std::size_t>(stage)];
      const Instruction& partner = program[index + 1];
      const auto pv = static_cast<std::size_t>(virtual_stage(spec, stage, partner.chunk));
      return times.forward[v] + times.backward_input[pv] +
             (partner.op == OpType::Backward ? times.backward_weight[pv] : 0.0);
    }
    case OpType::Backward:
    case OpType::BackwardInput:
      if (index > 0 && program[index - 1].overlap == Overlap::WithNext) return 0.0;   // its forward took the pair's time
      return times.backward_input[v] + (in.op == OpType::Backward ? times.backward_weight[v] : 0.0);
    case OpType::BackwardWeight: return times.backward_weight[v];
    case OpType::Recompute: return times.forward[v];
    case OpType::OptimizerStep: return times.optimizer_step;
    default: return 0.0;
  }
}

double send_seconds(const ScheduleSpec& spec, const Instruction& in, int stage, const OpTimes& times) {
  const bool activation = in.op == OpType::SendActivation;
  PW_CHECK(activation || in.op == OpType::SendGradient, "send_seconds of a " << op_name(in.op));
  const int v = virtual_stage(spec, stage, in.chunk);
  if (locate_virtual_stage(spec, activation ? v + 1 : v - 1).stage == stage) return 0.0;
  const auto vi = static_cast<std::size_t>(v);
  return activation ? times.send_activation[vi] : times.send_gradient[vi];
}

SimulationResult simulate(const ScheduleSpec& spec, const std::vector<std::vector<Instruction>>& programs,
                          const OpTimes& times) {
  return Simulation(spec, programs, times).run();
}

SimulationResult simulate(const ScheduleSpec& spec, const OpTimes& times) {
  std::vector<std::vector<Instruction>> programs;
  for (int s = 0; s < spec.stages; ++s) programs.push_back(stage_schedule(spec, s));
  return simulate(spec, programs, times);
}

}  // namespace pw::pipeline
