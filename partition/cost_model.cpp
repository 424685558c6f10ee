#include "partition/cost_model.h"

#include <algorithm>

#include "core/error.h"
#include "partition/selective_recompute.h"

namespace pw::partition {

double LinkModel::transfer_seconds(std::int64_t bytes) const {
  if (bytes <= 0) return 0.0;
  return latency_s + static_cast<double>(bytes) / bandwidth_bytes_per_s;
}

Recompute parse_recompute(const std::string& name) { return parse_enum<Recompute>(name); }

std::string recompute_name(Recompute recompute) { return std::string(enum_name(recompute)); }

RecomputeStages parse_recompute_stages(const std::string& text) {
  RecomputeStages out;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = text.find(',', begin);
    const std::string entry = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (entry != "none" && entry != "all")
      throw InputError("'" + text + "': stage " + std::to_string(out.size()) + " is '" + entry +
                       "'; expected one entry per stage, each none or all (e.g. none,all,all,none)");
    out.push_back(entry == "all" ? Recompute::All : Recompute::None);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

std::string recompute_text(Recompute mode, const RecomputeStages& per_stage) {
  if (per_stage.empty()) return recompute_name(mode);
  std::string out;
  for (const auto r : per_stage) out += (out.empty() ? "" : ",") + recompute_name(r);
  return out;
}

bool stage_recomputes(Recompute mode, const RecomputeStages& per_stage, int stage, int stages) {
  if (!per_stage.empty()) {
    PW_CHECK(stage >= 0 && stage < static_cast<int>(per_stage.size()),
             "no recompute choice for stage " << stage << " of " << per_stage.size());
    return per_stage[static_cast<std::size_t>(stage)] == Recompute::All;
  }
  switch (mode) {
    case Recompute::None: return false;
    case Recompute::All: return true;
    case Recompute::ExceptLast: return stage != stages - 1;
  }
  return false;
}

int optimizer_state_tensors(models::OptimizerKind kind) {
  switch (kind) {
    case models::OptimizerKind::Sgd: return 1;
    case models::OptimizerKind::Adam: return 2;
    case models::OptimizerKind::Adagrad: return 1;
  }
  return 2;
}

std::int64_t CostModel::memory_cap(int device) const {
  if (device_memory.empty()) return 0;
  if (device_memory.size() == 1) return device_memory.front();
  PW_CHECK(device >= 0 && device < static_cast<int>(device_memory.size()),
           "no memory cap for device " << device << " of " << device_memory.size());
  return device_memory[static_cast<std::size_t>(device)];
}

namespace {

// StageEstimate::input_half_peak_bytes of layers [range.begin, range.end): while layer i runs its
// input half, the layers before it hold their stashes and those after it their weight halves. A
// tensor two of them keep (a layer's kept output that the next keeps as its input) counts once;
// the first piece's input is the data loader's (`loader_input`). A layer that keeps its output
// (a ReLU, a residual block's last ReLU) lets go of it first thing in its input half, so its own
// peak is without it; the next layer's weight half holds it then, counted there.
std::int64_t input_half_peak(const std::vector<LayerProfile>& layers, StageRange range, bool loader_input) {
  const auto at = [&](int i) -> const LayerProfile& { return layers[static_cast<std::size_t>(i)]; };
  // after[i - begin]: the weight halves of the layers after i.
  std::vector<std::int64_t> after(static_cast<std::size_t>(range.end - range.begin), 0);
  for (int i = range.end - 2; i >= range.begin; --i) {
    std::int64_t& a = after[static_cast<std::size_t>(i - range.begin)];
    a = after[static_cast<std::size_t>(i + 1 - range.begin)] + at(i + 1).weight_half_bytes;
    if (i + 2 < range.end) a -= std::min(at(i + 2).weight_half_kept_input_bytes, at(i + 1).weight_half_kept_output_bytes);
  }
  std::int64_t before = 0, peak = 0;   // before: the stashes of the layers before i
  for (int i = range.begin; i < range.end; ++i) {
    const std::int64_t shared_input = i > range.begin ? std::min(at(i).kept_input_bytes, at(i - 1).kept_output_bytes) : 0;
    std::int64_t held = before + at(i).input_half_peak_bytes - shared_input + after[static_cast<std::size_t>(i - range.begin)];
    if (loader_input) held -= at(range.begin).kept_input_bytes;
    peak = std::max(peak, held);
    before += at(i).stash_bytes - shared_input;
  }
  return peak;
}

}  // namespace

StageEstimate estimate_piece(const std::vector<LayerProfile>& layers, const CostModel& cost, int piece, StageRange range) {
  PW_CHECK(range.begin >= 0 && range.begin < range.end && range.end <= static_cast<int>(layers.size()),
           "piece [" << range.begin << ", " << range.end << ") outside " << layers.size() << " layers");
  StageEstimate e;
  e.piece = piece;
  const PieceLocation where = locate_piece(cost.placement, cost.stages, cost.chunks, piece);
  e.device = where.stage;
  e.chunk = where.chunk;
  e.range = range;
  std::int64_t param_bytes = 0, buffer_bytes = 0, weight_half_bytes = 0, workspace_bytes = 0;
  for (int i = range.begin; i < range.end; ++i) {
    const auto& layer = layers[static_cast<std::size_t>(i)];
    e.layer_names.push_back(layer.name);
    e.parameters += layer.parameters;
    e.forward_seconds += layer.forward_seconds;
    e.backward_seconds += layer.backward_seconds;
    e.input_half_seconds += layer.input_half_seconds;
    e.weight_half_seconds += layer.weight_half_seconds;
    param_bytes += layer.param_bytes;
    buffer_bytes += layer.buffer_bytes;
    weight_half_bytes += layer.weight_half_bytes;
    // One tensor in two weight halves: this layer's kept input is the previous layer's kept output.
    if (i > range.begin) {
      const auto& before = layers[static_cast<std::size_t>(i) - 1];
      weight_half_bytes -= std::min(layer.weight_half_kept_input_bytes, before.weight_half_kept_output_bytes);
    }
    workspace_bytes = std::max(workspace_bytes, layer.workspace_bytes);
  }
  const bool last_piece = piece == cost.pieces() - 1;
  // Per stage, as the executor decides: under except-last every chunk of the last stage keeps its
  // activations (with chunks, the model's last piece may live on another stage).
  e.recomputes = stage_recomputes(cost.recompute, cost.recompute_stages, e.device, cost.stages);
  // What the layers keep (a tensor two of them keep counted once); chosen layers recompute inside
  // the backward, unless the stage re-runs every forward anyway.
  // The first piece's input is a view of the data loader's batch, held by the loader: keeping it
  // costs the piece nothing.
  const PieceStash stash = piece_stash(layers, range, e.recomputes ? std::set<std::string>{} : cost.recompute_layers,
                                       piece == 0 ? PieceInput::HeldElsewhere : PieceInput::Received);
  std::int64_t stash_bytes = stash.held_bytes;
  e.rebuild_bytes = stash.rebuild_bytes;
  e.rebuild_seconds = stash.rebuild_seconds;
  e.backward_seconds += e.recomputes ? e.forward_seconds : stash.rebuild_seconds;
  e.input_bytes = layers[static_cast<std::size_t>(range.begin)].input_bytes;
  e.output_bytes = layers[static_cast<std::size_t>(range.end - 1)].output_bytes;
  e.send_seconds = last_piece ? 0.0 : cost.link.transfer_seconds(e.output_bytes);
  e.send_gradient_seconds = piece == 0 ? 0.0 : cost.link.transfer_seconds(e.input_bytes);
  const auto m = static_cast<double>(cost.micro_batches);
  e.step_seconds = m * (e.forward_seconds + e.backward_seconds + e.send_seconds);

  const auto& first = layers[static_cast<std::size_t>(range.begin)];
  if (piece == 0) {
    weight_half_bytes -= first.weight_half_kept_input_bytes;
  } else {
    e.received_bytes = e.input_bytes;
    e.stash_received_bytes = stash.input_held_bytes;
    e.weight_half_received_bytes = first.weight_half_kept_input_bytes;
  }
  e.stash_bytes = stash_bytes;
  e.weight_half_bytes = weight_half_bytes;
  e.input_half_peak_bytes = input_half_peak(layers, range, piece == 0);
  e.workspace_bytes = workspace_bytes;
  const std::int64_t shards = std::max(1, cost.optimizer_shards);
  e.weight_bytes = param_bytes * 2 + (param_bytes * cost.optimizer_state + shards - 1) / shards + buffer_bytes;
  const std::int64_t in_flight = cost.in_flight == InFlight::AllMicroBatches ? cost.micro_batches
                                 : cost.in_flight == InFlight::TwiceStages
                                     ? std::min(2 * cost.stages - 1, cost.micro_batches)
                                     : std::min(cost.stages - e.device, cost.micro_batches);
  // Recomputing stages keep only each micro-batch's input, plus one micro-batch's full stash
  // while its forward is re-run for backward. Under a split backward a micro-batch holds, after
  // its input half, what the weight half needs until that runs (a rebuilt one too).
  const bool split = cost.backward == BackwardOps::Split;
  const std::int64_t held = split ? std::max(stash_bytes, weight_half_bytes) : stash_bytes;
  const std::int64_t held_recomputing = split ? std::max(e.received_bytes, weight_half_bytes) : e.received_bytes;
  // A selective piece rebuilds one run of layers at a time inside a backward.
  e.activation_bytes =
      (e.recomputes ? in_flight * held_recomputing + stash_bytes : in_flight * held + e.rebuild_bytes) + workspace_bytes;
  // ... or the most while the last of them runs its input half.
  if (split)
    e.activation_bytes = std::max(e.activation_bytes, (in_flight - 1) * (e.recomputes ? held_recomputing : held) +
                                                          e.input_half_peak_bytes);
  e.memory_bytes = e.weight_bytes + e.activation_bytes;
  // A device's chunks share its cap equally.
  e.memory_cap = cost.memory_cap(e.device) / cost.chunks;
  return e;
}

std::vector<StageEstimate> estimate_stages(const std::vector<LayerProfile>& layers, const CostModel& cost,
                                           const Partition& partition) {
  PW_CHECK(static_cast<int>(partition.size()) == cost.pieces(),
           "partition has " << partition.size() << " pieces, the cost model " << cost.pieces());
  check_partition(partition, static_cast<int>(layers.size()));
  std::vector<StageEstimate> estimates;
  for (std::size_t v = 0; v < partition.size(); ++v) {
    estimates.push_back(estimate_piece(layers, cost, static_cast<int>(v), partition[v]));
  }
  return estimates;
}

std::vector<DeviceEstimate> per_device(const std::vector<StageEstimate>& pieces, const CostModel& cost) {
  std::vector<DeviceEstimate> devices(static_cast<std::size_t>(cost.stages));
  for (int d = 0; d < cost.stages; ++d) {
    devices[static_cast<std::size_t>(d)].device = d;
    devices[static_cast<std::size_t>(d)].memory_cap = cost.memory_cap(d);
  }
  for (const auto& piece : pieces) {
    auto& device = devices.at(static_cast<std::size_t>(piece.device));
    device.step_seconds += piece.step_seconds;
    device.memory_bytes += piece.memory_bytes;
  }
  return devices;
}

std::vector<double> co_run_slowdowns(const std::vector<LayerProfile>& layers, const std::vector<StageEstimate>& pieces,
                                     int devices) {
  std::vector<double> alone(static_cast<std::size_t>(devices), 0.0), beside(alone.size(), 0.0);
  std::vector<bool> measured(alone.size(), true);
  for (const auto& e : pieces) {
    PW_CHECK(e.device >= 0 && e.device < devices, "piece " << e.piece << " on device " << e.device << " of " << devices);
    const auto d = static_cast<std::size_t>(e.device);
    for (int i = e.range.begin; i < e.range.end; ++i) {
      const auto& p = layers.at(static_cast<std::size_t>(i));
      const double own = p.forward_seconds + p.backward_seconds;
      const double with_others = p.co_run_forward_seconds + p.co_run_backward_seconds;
      if (own > 0.0 && with_others <= 0.0) measured[d] = false;
      alone[d] += own;
      beside[d] += with_others;
    }
  }
  std::vector<double> slowdowns(alone.size(), 0.0);
  for (std::size_t d = 0; d < alone.size(); ++d)
    if (measured[d] && alone[d] > 0.0) slowdowns[d] = std::max(0.0, beside[d] / alone[d] - 1.0);
  return slowdowns;
}

}  // namespace pw::partition
