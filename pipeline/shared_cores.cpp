// The schedule run as events in time order, compute ops progressing at the rate the cores allow
// those running at once; the plain simulation (simulator.cpp) checks the programs first.
#include "pipeline/shared_cores.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>

#include "core/error.h"

namespace pw::pipeline {

bool CoreSharing::oversubscribed(int ranks_per_replica) const {
  return cores > 0 && static_cast<long long>(threads_per_rank) * ranks_per_replica * replicas > cores;
}

bool CoreSharing::shared(int ranks_per_replica) const {
  if (oversubscribed(ranks_per_replica)) return true;
  const bool slowed = std::any_of(co_run_slowdown.begin(), co_run_slowdown.end(), [](double s) { return s > 0.0; });
  return cores > 0 && slowed && co_run_threads > threads_per_rank && ranks_per_replica * replicas > 1;
}

double CoreSharing::rate(int running) const {
  if (cores <= 0 || running <= 0) return 1.0;
  return std::min(1.0, static_cast<double>(cores) / (static_cast<double>(threads_per_rank) * running * replicas));
}

double CoreSharing::rate(int running, int stage) const {
  const double share = rate(running);
  if (cores <= 0 || running <= 0 || stage < 0 || static_cast<std::size_t>(stage) >= co_run_slowdown.size() ||
      co_run_threads <= threads_per_rank)
    return share;
  const double busy = std::min(static_cast<double>(cores), static_cast<double>(threads_per_rank) * running * replicas);
  const double beside = std::clamp((busy - threads_per_rank) / (co_run_threads - threads_per_rank), 0.0, 1.0);
  return share / (1.0 + std::max(0.0, co_run_slowdown[static_cast<std::size_t>(stage)]) * beside);
}

namespace {

enum class Payload { Activation, Gradient };

struct MessageKey {
  Payload payload;
  int micro_batch;
  int to_virtual_stage;
  friend auto operator<=>(const MessageKey&, const MessageKey&) = default;
};

struct StageState {
  std::size_t next = 0;
  bool running = false;
  double remaining = 0.0;   // seconds of the running op left, at full speed
  double start = 0.0;       // when the running op, or the wait at a receive, began
  bool waiting = false;     // at a receive whose message has not arrived
  double busy = 0.0;
  double finished = 0.0;    // when its last instruction ended
  std::vector<TimedOp> timeline;
};

class SharedSimulation {
 public:
  SharedSimulation(const ScheduleSpec& spec, const std::vector<std::vector<Instruction>>& programs,
                   const OpTimes& times, const CoreSharing& sharing)
      : spec_(spec), programs_(programs), times_(times), sharing_(sharing), stages_(programs.size()),
        rates_(programs.size(), 0.0) {}

  SimulationResult run() {
    double now = 0.0;
    while (true) {
      start_what_can_start(now);
      int running = 0;
      for (const auto& st : stages_) running += st.running ? 1 : 0;
      const double arrival = next_arrival(now);
      if (running == 0 && arrival == kNever) break;
      double dt = arrival - now;
      for (int s = 0; s < spec_.stages; ++s) {
        const StageState& st = stages_[static_cast<std::size_t>(s)];
        if (!st.running) continue;
        rates_[static_cast<std::size_t>(s)] = sharing_.rate(running, s);
        dt = std::min(dt, st.remaining / rates_[static_cast<std::size_t>(s)]);
      }
      for (int s = 0; s < spec_.stages; ++s) {
        StageState& st = stages_[static_cast<std::size_t>(s)];
        if (!st.running) continue;
        const double rate = rates_[static_cast<std::size_t>(s)];
        if (st.remaining / rate <= dt * (1.0 + 1e-12)) {
          finish(s, now + dt);
        } else {
          st.remaining -= rate * dt;
        }
      }
      now += dt;
    }
    for (int s = 0; s < spec_.stages; ++s)
      PW_CHECK(stages_[static_cast<std::size_t>(s)].next == program(s).size(),
               "shared-core simulation: stage " << s << " stopped at instruction " << stages_[static_cast<std::size_t>(s)].next);
    return result();
  }

 private:
  static constexpr double kNever = std::numeric_limits<double>::infinity();

  const std::vector<Instruction>& program(int stage) const { return programs_[static_cast<std::size_t>(stage)]; }

  // Runs every stage's instructions that need no core (sends, receives whose message is there,
  // ReduceGrads, ops of no time) and starts its next compute op, until none can move at `now`.
  void start_what_can_start(double now) {
    for (bool moved = true; moved;) {
      moved = false;
      for (int s = 0; s < spec_.stages; ++s) {
        StageState& st = stages_[static_cast<std::size_t>(s)];
        while (!st.running && st.next < program(s).size() && step(s, now)) moved = true;
      }
    }
  }

  // One instruction of `stage` at `now`; false when it waits for a message.
  bool step(int stage, double now) {
    StageState& st = stages_[static_cast<std::size_t>(stage)];
    const Instruction& in = program(stage)[st.next];
    const int v = in.op == OpType::ReduceGrads || in.op == OpType::OptimizerStep ? 0 : virtual_stage(spec_, stage, in.chunk);
    switch (in.op) {
      case OpType::RecvActivation:
      case OpType::RecvGradient: {
        const bool activation = in.op == OpType::RecvActivation;
        if (!st.waiting) st.start = now;
        auto it = mailbox_.find({activation ? Payload::Activation : Payload::Gradient, in.micro_batch, v});
        if (it == mailbox_.end() || it->second.empty() || it->second.front() > now) {
          st.waiting = true;
          return false;
        }
        it->second.pop_front();
        st.waiting = false;
        done(stage, st.start, now);
        return true;
      }
      case OpType::SendActivation:
      case OpType::SendGradient: {
        const bool activation = in.op == OpType::SendActivation;
        const int to = activation ? v + 1 : v - 1;
        mailbox_[{activation ? Payload::Activation : Payload::Gradient, in.micro_batch, to}].push_back(
            now + send_seconds(spec_, in, stage, times_));
        done(stage, now, now);
        return true;
      }
      default: break;
    }
    const double seconds = op_seconds(stage, st.next);
    if (seconds <= 0.0) {
      // The backward of an overlapped pair: its forward took the pair's time.
      const bool pair = st.next > 0 && program(stage)[st.next - 1].overlap == Overlap::WithNext;
      done(stage, pair ? st.timeline.back().start : now, now);
      return true;
    }
    st.running = true;
    st.remaining = seconds;
    st.start = now;
    return false;
  }

  double op_seconds(int stage, std::size_t index) const {
    return compute_seconds(spec_, program(stage), index, stage, times_);
  }

  void finish(int stage, double end) {
    StageState& st = stages_[static_cast<std::size_t>(stage)];
    st.running = false;
    st.busy += end - st.start;
    done(stage, st.start, end);
  }

  void done(int stage, double start, double end) {
    StageState& st = stages_[static_cast<std::size_t>(stage)];
    st.timeline.push_back({program(stage)[st.next], start, end});
    st.finished = end;
    ++st.next;
  }

  // The earliest arrival after `now` of a message a waiting stage receives next.
  double next_arrival(double now) const {
    double earliest = kNever;
    for (int s = 0; s < spec_.stages; ++s) {
      const StageState& st = stages_[static_cast<std::size_t>(s)];
      if (!st.waiting) continue;
      const Instruction& in = program(s)[st.next];
      const bool activation = in.op == OpType::RecvActivation;
      const auto it = mailbox_.find({activation ? Payload::Activation : Payload::Gradient, in.micro_batch,
                                     virtual_stage(spec_, s, in.chunk)});
      if (it != mailbox_.end() && !it->second.empty() && it->second.front() > now)
        earliest = std::min(earliest, it->second.front());
    }
    return earliest;
  }

  SimulationResult result() {
    std::vector<StageRun> runs;
    for (auto& st : stages_) runs.push_back({st.finished, st.busy, std::move(st.timeline)});
    return simulation_result(std::move(runs));
  }

  const ScheduleSpec& spec_;
  const std::vector<std::vector<Instruction>>& programs_;
  const OpTimes& times_;
  const CoreSharing sharing_;
  std::vector<StageState> stages_;
  std::vector<double> rates_;   // each running stage's op speed in the current interval
  std::map<MessageKey, std::deque<double>> mailbox_;   // arrival times, in send order
};

}  // namespace

SimulationResult simulate(const ScheduleSpec& spec, const std::vector<std::vector<Instruction>>& programs,
                          const OpTimes& times, const CoreSharing& sharing) {
  SimulationResult plain = simulate(spec, programs, times);   // checks the programs, reports deadlocks
  if (!sharing.shared(spec.stages)) return plain;
  return SharedSimulation(spec, programs, times, sharing).run();
}

SimulationResult simulate(const ScheduleSpec& spec, const OpTimes& times, const CoreSharing& sharing) {
  std::vector<std::vector<Instruction>> programs;
  for (int s = 0; s < spec.stages; ++s) programs.push_back(stage_schedule(spec, s));
  return simulate(spec, programs, times, sharing);
}

double concurrent_seconds(const std::vector<double>& seconds, const CoreSharing& sharing) {
  if (seconds.empty()) return 0.0;
  if (!sharing.shared(static_cast<int>(seconds.size()))) return *std::max_element(seconds.begin(), seconds.end());
  // Each progresses at its stage's rate among those still running; each end speeds up the rest.
  std::vector<double> remaining = seconds, rates(seconds.size(), 0.0);
  double now = 0.0;
  while (true) {
    int running = 0;
    for (const double r : remaining) running += r > 0.0 ? 1 : 0;
    if (running == 0) return now;
    double dt = std::numeric_limits<double>::infinity();
    for (std::size_t s = 0; s < remaining.size(); ++s) {
      if (remaining[s] <= 0.0) continue;
      rates[s] = sharing.rate(running, static_cast<int>(s));
      dt = std::min(dt, remaining[s] / rates[s]);
    }
    for (std::size_t s = 0; s < remaining.size(); ++s)
      if (remaining[s] > 0.0) remaining[s] = remaining[s] / rates[s] <= dt * (1.0 + 1e-12) ? 0.0 : remaining[s] - rates[s] * dt;
    now += dt;
  }
}

}  // namespace pw::pipeline
