#include "pipeline/schedule_comparison.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/error.h"
#include "partition/model_description.h"

namespace pw::pipeline {

namespace {

int chunks_of(ScheduleKind kind, int interleaved_chunks) {
  const bool interleaved = kind == ScheduleKind::Interleaved || kind == ScheduleKind::InterleavedZeroBubble;
  return interleaved && interleaved_chunks > 1 ? interleaved_chunks : default_chunks(kind);
}

void compare_one(ScheduleComparison& row, const partition::ModelDescription& model,
                 const std::vector<partition::LayerProfile>& profiles, const partition::CostModel& base,
                 const SplitChoice& split, const CoreSharing& sharing) {
  const ScheduleSpec spec{row.kind, base.stages, base.micro_batches, row.chunks};
  validate(spec);
  const int pieces = spec.stages * spec.chunks;
  if (!split.split_points.empty()) {
    const int split_pieces = static_cast<int>(split.split_points.size()) + 1;
    PW_INPUT_CHECK(split_pieces == pieces, "the split makes " << split_pieces << " pieces; "
                                                              << schedule_kind_name(row.kind) << " needs " << spec.stages
                                                              << " x " << spec.chunks << " = " << pieces);
  }
  PW_INPUT_CHECK(pieces <= model.layer_count(), model.name << " has " << model.layer_count() << " layers, fewer than the "
                                                           << pieces << " pieces " << schedule_kind_name(row.kind)
                                                           << " needs");
  partition::CostModel cost = base;
  cost.chunks = spec.chunks;
  cost.placement = chunk_placement(spec.kind);
  cost.in_flight = in_flight_of(spec.kind);
  cost.backward = backward_ops_of(spec.kind);
  const auto estimates = partition::estimate_stages(profiles, cost, choose_partition(model, split, cost, profiles));
  std::vector<std::vector<Instruction>> programs;
  for (int s = 0; s < spec.stages; ++s) programs.push_back(stage_schedule(spec, s));
  CoreSharing stage_sharing = sharing;
  stage_sharing.co_run_slowdown = partition::co_run_slowdowns(profiles, estimates, spec.stages);
  const SimulationResult sim = simulate(spec, programs, op_times(spec, estimates), stage_sharing);
  row.step_seconds = sim.makespan;
  row.bubble_fraction = sim.bubble_fraction;
  for (int s = 0; s < spec.stages; ++s) {
    const auto& program = programs[static_cast<std::size_t>(s)];
    row.peak_held.push_back(peak_in_flight(program, HeldUntil::WeightGradientDone));
    row.peak_activation_bytes.push_back(peak_activation_bytes(spec, s, program, estimates));
  }
  row.messages_per_micro_batch = static_cast<double>(messages_between_stages(spec, programs)) / spec.micro_batches;
  row.parameter_copies = parameter_copies(spec.kind);
}

}  // namespace

std::vector<ScheduleComparison> compare_schedules(const partition::ModelDescription& model,
                                                  const std::vector<partition::LayerProfile>& profiles,
                                                  const partition::CostModel& base, const SplitChoice& split,
                                                  int interleaved_chunks, const CoreSharing& sharing) {
  std::vector<ScheduleComparison> rows;
  for (const auto& [kind, name] : EnumNames<ScheduleKind>::names) {
    ScheduleComparison row;
    row.kind = kind;
    row.chunks = chunks_of(kind, interleaved_chunks);
    try {
      compare_one(row, model, profiles, base, split, sharing);
    } catch (const InputError& e) {
      row = ScheduleComparison{kind, row.chunks, e.what()};
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

HeldActivations peak_activations(const ScheduleSpec& spec, int stage, const std::vector<Instruction>& program,
                                 const std::vector<partition::StageEstimate>& pieces) {
  auto piece = [&](int chunk) -> const partition::StageEstimate& {
    return pieces.at(static_cast<std::size_t>(virtual_stage(spec, stage, chunk)));
  };
  // A program with its Recompute ops rebuilds a context there and holds it until the backward
  // (or, split, its weight half) is done: several may be pending under a zero-bubble schedule.
  // Without them, one rebuilt context at a time is the estimate.
  const bool explicit_recompute =
      std::any_of(program.begin(), program.end(), [](const Instruction& in) { return in.op == OpType::Recompute; });
  // One backward at a time: a context rebuilt whole before it, or (selective) one run of layers
  // rebuilt inside it.
  std::int64_t recompute_stash = 0;
  for (int c = 0; c < spec.chunks; ++c) {
    if (!explicit_recompute && piece(c).recomputes) recompute_stash = std::max(recompute_stash, piece(c).stash_bytes);
    recompute_stash = std::max(recompute_stash, piece(c).rebuild_bytes);
  }
  // What each (micro-batch, chunk) holds now, and how much of it is its received input: from its
  // forward its stash (only its input when the piece recomputes; from its Recompute the rebuilt
  // stash beside that input, which the executor keeps until the backward), from a split
  // backward's input half what the weight half needs, nothing once its backward is whole.
  std::map<std::pair<int, int>, HeldActivations> unit;
  HeldActivations held, peak;
  const auto hold = [&](const Instruction& in, std::int64_t bytes, std::int64_t received) {
    HeldActivations& now = unit[{in.micro_batch, in.chunk}];
    held.bytes += bytes - now.bytes;
    held.received_bytes += received - now.received_bytes;
    now = {bytes, received};
    if (held.bytes > peak.bytes) {
      peak.bytes = held.bytes;
      peak.received_bytes = held.received_bytes;
    }
  };
  for (const Instruction& in : program) {
    const auto& e = piece(in.chunk);
    switch (in.op) {
      case OpType::Forward:
        if (e.recomputes) hold(in, e.received_bytes, e.received_bytes);
        else hold(in, e.stash_bytes, e.stash_received_bytes);
        break;
      case OpType::Recompute:
        if (e.recomputes) hold(in, e.stash_bytes - e.stash_received_bytes + e.received_bytes, e.received_bytes);
        break;
      case OpType::BackwardInput: {
        // While it runs, the unit goes from its stash to its weight half through the piece's
        // input-half peak (which has the stash in it; a rebuilt unit's input beside it stays too).
        const std::int64_t now = unit[{in.micro_batch, in.chunk}].bytes;
        peak.input_half_peak_bytes =
            std::max(peak.input_half_peak_bytes, held.bytes - std::min(now, e.stash_bytes) + e.input_half_peak_bytes);
        hold(in, e.weight_half_bytes, e.weight_half_received_bytes);
        break;
      }
      case OpType::Backward:
      case OpType::BackwardWeight: hold(in, 0, 0); break;
      default: break;
    }
  }
  peak.bytes += recompute_stash;
  return peak;
}

std::int64_t peak_activation_bytes(const ScheduleSpec& spec, int stage, const std::vector<Instruction>& program,
                                   const std::vector<partition::StageEstimate>& pieces) {
  return peak_activations(spec, stage, program, pieces).bytes;
}

int messages_between_stages(const ScheduleSpec& spec, const std::vector<std::vector<Instruction>>& programs) {
  int messages = 0;
  for (int s = 0; s < static_cast<int>(programs.size()); ++s) {
    for (const Instruction& in : programs[static_cast<std::size_t>(s)]) {
      if (in.op != OpType::SendActivation && in.op != OpType::SendGradient) continue;
      const int to = virtual_stage(spec, s, in.chunk) + (in.op == OpType::SendActivation ? 1 : -1);
      if (locate_virtual_stage(spec, to).stage != s) ++messages;
    }
  }
  return messages;
}

int parameter_copies(ScheduleKind) { return 1; }

}  // namespace pw::pipeline
