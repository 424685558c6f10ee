#include "train/layout_prediction.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/ops/half_support.h"
#include "models/precision.h"
#include "partition/piece_placement.h"
#include "pipeline/recompute.h"
#include "pipeline/schedule_comparison.h"

namespace pw::train {
namespace {

using kernels::MemoryKind;

std::int64_t& at(kernels::BytesByKind& bytes, MemoryKind kind) { return bytes[static_cast<std::size_t>(kind)]; }

std::int64_t in_activation_dtype(std::int64_t fp32_bytes, models::Precision precision) {
  return precision == models::Precision::Fp32 ? fp32_bytes : fp32_bytes / 2;
}

// Ranks are numbered replica-major (rank = replica * P + stage), as the engine does.
int node_of(int stage, int replica, int stages, const LinkSpeeds& links) {
  return links.devices_per_node > 0 ? (replica * stages + stage) / links.devices_per_node : 0;
}

bool crosses_nodes(int stage_a, int stage_b, int stages, int replicas, const LinkSpeeds& links) {
  for (int r = 0; r < replicas; ++r)
    if (node_of(stage_a, r, stages, links) != node_of(stage_b, r, stages, links)) return true;
  return false;
}

bool replicas_cross_nodes(int stage, int stages, int replicas, const LinkSpeeds& links) {
  for (int r = 1; r < replicas; ++r)
    if (node_of(stage, r, stages, links) != node_of(stage, 0, stages, links)) return true;
  return false;
}

// Each piece's sends at the speed of the link its neighbour is on.
void time_sends(std::vector<partition::StageEstimate>& pieces, const partition::CostModel& cost, int replicas,
                const LinkSpeeds& links, double latency_s) {
  const auto link = [&](int a, int b) {
    partition::LinkModel m;
    m.latency_s = latency_s;
    m.bandwidth_bytes_per_s =
        crosses_nodes(a, b, cost.stages, replicas, links) ? links.inter_node_bytes_per_s : links.stage_bytes_per_s;
    return m;
  };
  const auto n = static_cast<int>(pieces.size());
  for (int v = 0; v < n; ++v) {
    auto& e = pieces[static_cast<std::size_t>(v)];
    e.send_seconds = v + 1 < n ? link(e.device, pieces[static_cast<std::size_t>(v + 1)].device).transfer_seconds(e.output_bytes) : 0.0;
    e.send_gradient_seconds = v > 0 ? link(e.device, pieces[static_cast<std::size_t>(v - 1)].device).transfer_seconds(e.input_bytes) : 0.0;
    e.step_seconds = cost.micro_batches * (e.forward_seconds + e.backward_seconds + e.send_seconds);
  }
}

// Ring all-reduce moves 2 (R - 1) / R of the buffer through each member in 2 (R - 1) steps, each
// bucket in a call of its own; reduce-scatter then all-gather (sharded state) moves the same in the
// same steps, but in two calls per bucket. Every call pays its wake-up in full, as the sync is a
// tail after the pipeline here: a bucket reduced while the backward still runs is hidden in the
// job, so with many buckets this is an upper bound.
// `link` is the replicas' (latency per ring step); `call_s` each call's wake-up.
double gradient_sync_seconds(std::int64_t bytes, int replicas, const partition::LinkModel& link, double call_s,
                             std::int64_t bucket_bytes, dp::OptimizerState state) {
  if (replicas <= 1 || bytes == 0) return 0.0;
  const double r = replicas;
  const auto buckets = static_cast<double>(bucket_bytes > 0 ? (bytes + bucket_bytes - 1) / bucket_bytes : 1);
  const double calls = state == dp::OptimizerState::Sharded ? 2.0 : 1.0;
  return 2.0 * (r - 1.0) / r * static_cast<double>(bytes) / link.bandwidth_bytes_per_s +
         buckets * (calls * call_s + 2.0 * (r - 1.0) * link.latency_s);
}

// Bytes the optimizer step reads and writes per F32 parameter it updates: weight, gradient and
// each state tensor read, weight and state written.
int optimizer_bytes_per_parameter(models::OptimizerKind kind) {
  const int state = partition::optimizer_state_tensors(kind);
  return 4 * (2 + state) + 4 * (1 + state);
}

// Whether the job's ranks run on CUDA devices (/resources/devices when given, else /resources/device).
bool on_cuda(const JobPlan& plan) {
  const auto& r = plan.config.resources;
  return r.devices.empty() ? r.device.is_cuda()
                           : std::any_of(r.devices.begin(), r.devices.end(), [](const kernels::Device& d) { return d.is_cuda(); });
}

// Input batches of the first stage's data loader in its device memory. On CPU devices, with the
// ranks as threads (as plan predicts them), the loader's buffers are memory of cpu:0, where
// replica 0's first stage runs, for every replica (ranks as processes hold their own replica's
// each), and a feed keeps every buffer it made: as many as were in use at once, the batches built
// ahead (/resources/prefetch_batches), the one training and the one before it, or fewer when the
// run trains fewer batches. On GPUs they are pinned host memory; the device holds the current
// batch and a copy of the next (not measured).
std::int64_t loader_batches(const JobPlan& plan) {
  if (on_cuda(plan)) return 2;
  std::int64_t per_feed = plan.config.resources.prefetch_batches + 2;
  if (plan.config.data.steps > 0) per_feed = std::min(per_feed, plan.config.data.steps);
  return static_cast<std::int64_t>(plan.replicas()) * per_feed;
}

// The job's cost model with the links between its stages: `links`' bandwidth and latency, and when
// the ranks outnumber the host's cores, the wait of a message's receiver for one.
partition::CostModel stage_cost_of(const JobPlan& plan, const LinkSpeeds& links) {
  auto cost = cost_model_of(plan);
  cost.link.bandwidth_bytes_per_s = links.stage_bytes_per_s;
  cost.link.latency_s = links.latency_s;
  if (core_sharing_of(plan, links).oversubscribed(plan.schedule.stages)) cost.link.latency_s += links.busy_handoff_s;
  return cost;
}

}  // namespace

LinkSpeeds default_link_speeds(const kernels::Device& device) {
  LinkSpeeds s;
  if (device.is_cuda()) {
    s.stage_bytes_per_s = 25e9;
    s.replica_bytes_per_s = 25e9;
    s.memory_bytes_per_s = 1e12;
    s.host_link_bytes_per_s = 25e9;   // PCIe 4.0 x16
  }
  return s;
}

bool LayoutPrediction::fits() const {
  return std::all_of(stages.begin(), stages.end(), [](const StagePrediction& s) { return s.fits(); });
}

std::int64_t LayoutPrediction::peak_bytes() const {
  std::int64_t peak = 0;
  for (const auto& s : stages) peak = std::max(peak, s.peak_bytes);
  return peak;
}

MemorySettings memory_settings_of(const JobPlan& plan) {
  MemorySettings s;
  s.offload = plan.optimizer.offload;
  s.precision = plan.precision;
  const auto& r = plan.config.resources;
  const kernels::Device device = r.devices.empty() ? r.device : r.devices.front();
  if (plan.precision != models::Precision::Fp32 &&
      !kernels::runs_natively(device, models::activation_dtype(plan.precision), kernels::HalfOp::Conv))
    s.half_activations = HalfActivations::ViaF32;
  s.optimizer = plan.optimizer.kind;
  s.replicas = plan.replicas();
  s.optimizer_state = plan.config.replicas.optimizer_state;
  s.bucket_bytes = plan.config.replicas.bucket_bytes;
  s.update_validation =
      pipeline::resolve_update_validation(plan.config.recovery.update_validation, plan.schedule.kind, s.offload);
  return s;
}

std::int64_t micro_batch_size_of(const JobPlan& plan) {
  return plan.config.data.batch_size / plan.replicas() / plan.schedule.micro_batches;
}

partition::ProfileOptions prediction_profile_options(const JobPlan& plan, std::int64_t micro_batch_size, int repeats,
                                                     std::uint64_t seed, const LinkSpeeds& links) {
  auto options = partition::job_profile_options(micro_batch_size, plan.schedule.micro_batches);
  options.repeats = repeats;
  options.seed = seed;
  options.optimizer = plan.optimizer;
  options.co_runners = co_runners_of(core_sharing_of(plan, links));
  options.min_chain_seconds = kPredictionChainSeconds;
  return options;
}

int co_runners_of(const pipeline::CoreSharing& sharing) {
  if (sharing.cores <= 0 || sharing.threads_per_rank <= 0) return 0;
  return std::max(0, sharing.co_run_threads / sharing.threads_per_rank - 1);
}

LayoutPrediction predict_layout(const JobPlan& plan, const std::vector<partition::LayerProfile>& profiles,
                                const partition::Partition& split, const LinkSpeeds& links) {
  PW_CHECK(static_cast<int>(profiles.size()) == plan.model.layer_count(),
           profiles.size() << " layer profiles for " << plan.model.layer_count() << " layers");
  LayoutPrediction out;
  out.cost = cost_model_of(plan);
  out.cost.link.bandwidth_bytes_per_s = links.stage_bytes_per_s;
  const int P = plan.schedule.stages, R = plan.replicas();
  pipeline::CoreSharing sharing = core_sharing_of(plan, links);
  // Ranks outnumbering the cores: a message's receiver may wait for one.
  out.cost.link.latency_s = links.latency_s + (sharing.oversubscribed(P) ? links.busy_handoff_s : 0.0);
  out.partition = split;
  out.pieces = partition::estimate_stages(profiles, out.cost, split);
  sharing.co_run_slowdown = partition::co_run_slowdowns(profiles, out.pieces, P);
  time_sends(out.pieces, out.cost, R, links, out.cost.link.latency_s);
  auto times = pipeline::op_times(plan.schedule, out.pieces);
  out.simulation = pipeline::simulate(plan.schedule, times, sharing);

  const auto settings = memory_settings_of(plan);
  const std::int64_t local_batch = plan.config.data.batch_size / R;
  const std::int64_t sample_bytes = kernels::shape_numel(plan.model.sample_shape) * 4;
  std::vector<double> tails;   // per stage: gradient collectives and optimizer step
  for (int d = 0; d < P; ++d) {
    StagePrediction s;
    s.stage = d;
    if (sharing.shared(P)) s.co_run_slowdown = sharing.co_run_slowdown.at(static_cast<std::size_t>(d));
    s.memory_cap = out.cost.memory_cap(d);
    std::vector<const partition::LayerProfile*> layers;
    // Activations: what the stage's own program holds at its peak (micro-batches are held from
    // their forward until their backward, or under a split backward until its weight half, so
    // a zero-bubble stage that defers its W's holds more than 1F1B's count), plus the largest
    // working set of one layer; or, under a split backward, the most while an input half runs,
    // which keeps what it is done with for the weight half.
    const auto program = plan.programs.empty() ? pipeline::default_program(plan.schedule, d, plan.recompute_of(d))
                                               : plan.programs.at(static_cast<std::size_t>(d));
    const pipeline::HeldActivations held = pipeline::peak_activations(plan.schedule, d, program, out.pieces);
    std::int64_t workspace = 0, messages = 0, param_bytes = 0, buffer_bytes = 0;
    double measured_step = 0.0;
    for (const auto& e : out.pieces) {
      if (e.device != d) continue;
      s.parameters += e.parameters;
      s.pipeline_seconds += e.step_seconds;
      workspace = std::max(workspace, e.workspace_bytes);
      // A received activation or gradient per neighbour, held as communication until its
      // consumer runs (what the measured runs hold at their peak).
      if (e.piece > 0) messages += e.input_bytes;
      if (e.piece + 1 < out.cost.pieces()) messages += e.output_bytes;
      for (int i = e.range.begin; i < e.range.end; ++i) {
        layers.push_back(&profiles[static_cast<std::size_t>(i)]);
        param_bytes += profiles[static_cast<std::size_t>(i)].param_bytes;
        buffer_bytes += profiles[static_cast<std::size_t>(i)].buffer_bytes;
        measured_step += profiles[static_cast<std::size_t>(i)].optimizer_seconds;
      }
    }
    // Received inputs that the layers keep are the allocator's communication memory.
    std::int64_t activations = std::max(held.bytes + workspace, held.input_half_peak_bytes) - held.received_bytes;
    // Ops run via F32 (16-bit weights on a CPU without AVX-512): each micro-batch in flight keeps
    // its layers' weights converted to F32 for its backward.
    if (settings.half_activations == HalfActivations::ViaF32) {
      std::int64_t converted = 0;
      for (const auto* layer : layers)
        for (const auto bytes : layer->copied_tensor_bytes) converted += bytes;
      activations += converted * pipeline::peak_in_flight(program, pipeline::HeldUntil::WeightGradientDone);
    }
    messages += held.received_bytes;
    // Training: weights, the schedule's activations in flight, the queued messages, and on the
    // first stage the data loader's input batches (loader_batches).
    auto training = stage_memory(layers, activations, settings);
    at(training, MemoryKind::Communication) += in_activation_dtype(messages, plan.precision);
    // The update: under mixed precision each weight's new 16-bit values are rounded into a
    // workspace tensor, one weight at a time, before they replace its copy (offloaded, on the
    // host); no activations are held.
    // Updating before the verdict (zero-bubble kinds), the stage keeps a copy of what it changes
    // until the verdict; the rounding comes at the next step's start, after it.
    auto update = weight_memory(layers, settings);
    const std::int64_t rounding =
        settings.offload != models::OptimizerOffload::Host ? largest_compute_copy_bytes(layers, plan.precision) : 0;
    at(update, MemoryKind::Workspace) += std::max(rounding, update_undo_bytes(layers, settings));
    // The first stage's loader batches stay allocated through the update too (a feed keeps every
    // buffer it made). On CPU devices replica 0's rank holds every replica's (loader_batches), the
    // other replicas' ranks none.
    const std::int64_t other_replicas_peak = std::max(total_bytes(update), total_bytes(training));
    if (d == 0) {
      const std::int64_t loader = loader_batches(plan) * in_activation_dtype(local_batch * sample_bytes, plan.precision);
      at(training, MemoryKind::Workspace) += loader;
      at(update, MemoryKind::Workspace) += loader;
    }
    s.memory = total_bytes(update) > total_bytes(training) ? update : training;
    s.peak_bytes = total_bytes(s.memory);
    s.other_replicas_peak_bytes = R > 1 && !on_cuda(plan) ? other_replicas_peak : s.peak_bytes;

    // Replicas on other nodes go through the same collective as those on one host, then the network:
    // never faster than the (measured) local one.
    const bool remote = replicas_cross_nodes(d, P, R, links);
    partition::LinkModel replica_link;
    replica_link.bandwidth_bytes_per_s =
        remote ? std::min(links.inter_node_bytes_per_s, links.replica_bytes_per_s) : links.replica_bytes_per_s;
    replica_link.latency_s = remote ? std::max(links.latency_s, links.replica_latency_s) : links.replica_latency_s;
    s.gradient_sync_seconds = gradient_sync_seconds(param_bytes, R, replica_link, links.replica_call_s,
                                                    plan.config.replicas.bucket_bytes, settings.optimizer_state);
    // Running statistics (batch norm) follow replica 0 every step: one more collective, a
    // broadcast. It runs right behind another one (after the all-reduce and the short update, or
    // just ahead of the sharded weights' gather on the same thread), so the ranks are awake and it
    // pays no call: traced resnet18 replicas spent 0.1-0.4 ms on it where a call costs 2 ms.
    // A stage without parameters has no collective before it: then it pays the call.
    if (R > 1 && buffer_bytes > 0)
      s.gradient_sync_seconds += replica_link.transfer_seconds(buffer_bytes) + (param_bytes == 0 ? links.replica_call_s : 0.0);
    const double updated = settings.optimizer_state == dp::OptimizerState::Sharded ? static_cast<double>(R) : 1.0;
    const double updated_parameters = static_cast<double>(param_bytes) / 4.0 / updated;
    // Offloaded, the update is the host's vectorised one (on CPU devices too: resnet18 and vgg16
    // steps there measure at about the stated host bandwidth, twice as fast as the device kernels).
    if (settings.offload == models::OptimizerOffload::Host) {
      s.optimizer_seconds =
          updated_parameters * optimizer_bytes_per_parameter(settings.optimizer) / links.host_memory_bytes_per_s;
      if (links.host_link_bytes_per_s > 0.0) s.optimizer_seconds += updated_parameters * 8.0 / links.host_link_bytes_per_s;
    } else if (measured_step > 0.0) {
      // Measured layer by layer (the profile's optimizer steps); a replica updates its 1/R share.
      s.optimizer_seconds = measured_step / updated;
    } else {
      s.optimizer_seconds =
          updated_parameters * optimizer_bytes_per_parameter(settings.optimizer) / links.memory_bytes_per_s;
    }
    tails.push_back(s.gradient_sync_seconds + s.optimizer_seconds);
    out.stages.push_back(s);
  }
  // Every rank's tail starts when the pipeline is done: the slowest stage's, or all of them
  // sharing the cores. The slowdowns beside the others are the layers' compute: the collectives
  // were measured with the replicas running at once, and the optimizer steps are timed alone.
  pipeline::CoreSharing tail_sharing = sharing;
  tail_sharing.co_run_slowdown.clear();
  out.step_seconds = out.simulation.makespan + pipeline::concurrent_seconds(tails, tail_sharing);
  return out;
}

pipeline::CoreSharing core_sharing_of(const JobPlan& plan, const LinkSpeeds& links) {
  pipeline::CoreSharing sharing;
  const auto& r = plan.config.resources;
  if (on_cuda(plan) || links.host_cores <= 0 || r.threads <= 0) return sharing;
  sharing.cores = links.host_cores;
  sharing.threads_per_rank = r.threads;
  sharing.replicas = plan.replicas();
  // The job's threads that can compute at once on the host, in whole ranks (a profile runs that
  // many ranks' worth of co-runners beside the timed one, co_runners_of).
  const long long ranks_at_once = std::min<long long>(links.host_cores / r.threads,
                                                      static_cast<long long>(plan.schedule.stages) * plan.replicas());
  sharing.co_run_threads = static_cast<int>(ranks_at_once * r.threads);
  return sharing;
}

LayoutPrediction predict_job(const JobPlan& plan, const std::vector<partition::LayerProfile>& profiles,
                             const LinkSpeeds& links) {
  const auto cost = stage_cost_of(plan, links);
  const auto split = pipeline::choose_partition(plan.model, split_choice_of(plan), cost, profiles);
  return predict_layout(plan, profiles, split, links);
}

LayoutPrediction predict_balanced_split(const JobPlan& plan, const std::vector<partition::LayerProfile>& profiles,
                                        const LinkSpeeds& links) {
  auto cost = stage_cost_of(plan, links);
  pipeline::SplitChoice choice;
  choice.method = partition::PartitionMethod::Profile;
  partition::Partition split;
  try {
    split = pipeline::choose_partition(plan.model, choice, cost, profiles);
  } catch (const InputError&) {
    cost.device_memory.clear();
    split = pipeline::choose_partition(plan.model, choice, cost, profiles);
  }
  return predict_layout(plan, profiles, split, links);
}

}  // namespace pw::train
