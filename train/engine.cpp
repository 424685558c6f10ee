#include "train/engine.h"

#include "train/fault_injection.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "core/clock.h"
#include "core/memory_trace.h"
#include "core/trace.h"
#include "core/units.h"
#include "dataparallel/buffer_broadcast.h"
#include "dataparallel/topology.h"
#include "kernels/host_ledger.h"
#include "kernels/math_mode.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/half_support.h"
#include "kernels/ops/host_optimizer.h"
#include "kernels/runtime.h"
#include "kernels/stream.h"
#include "models/checkpoint.h"
#include "models/layers/batch_norm.h"
#include "models/loss.h"
#include "models/metrics.h"
#include "pipeline/error_context.h"
#include "pipeline/micro_batch.h"
#include "pipeline/schedule_file.h"
#include "train/replica_rows_exchange.h"

namespace pw::train {
namespace {

using std::chrono::milliseconds;

milliseconds millis(double seconds) { return milliseconds(static_cast<std::int64_t>(seconds * 1000.0)); }

// Control messages (Tag::micro_batch) between the ranks of one job. Weights go as kFirstWeight + i;
// the scores' id lies far above any weight count.
enum ControlMessage : int {
  kStepFigures = 0, kEvalFigures = 1, kWeightNames = 2, kFirstWeight = 3, kEvalScores = 1 << 30, kUpdateCheck = (1 << 30) + 1,
  kPushesDone = (1 << 30) + 2, kWeightsFinite = (1 << 30) + 3, kPendingKeys = (1 << 30) + 4, kPendingRows = (1 << 30) + 5
};
// Tag::virtual_stage of the tied weights' starting values (other control messages use 0).
constexpr int kTiedStart = 1 << 20;

kernels::Tensor doubles_tensor(const std::vector<double>& values) {
  return kernels::Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())}, kernels::Device::cpu(0));
}

std::vector<double> tensor_doubles(const kernels::Tensor& t, std::size_t expected, const std::string& what) {
  PW_CHECK(t.dtype() == kernels::DType::F64 && static_cast<std::size_t>(t.numel()) == expected,
           what << ": expected " << expected << " F64 values, got " << t.describe());
  return t.to_double_vector();
}

std::string split_text(const partition::Partition& p) {
  std::ostringstream out;
  for (std::size_t i = 1; i < p.size(); ++i) out << (i > 1 ? "," : "") << p[i].begin;
  return out.str();
}

// Every figure a rank reports after a step, in this order.
enum StepFigure : std::size_t {
  kLoss, kCorrect, kSamples, kBusy, kPeak, kBuckets, kExposed, kFlags, kBoundaryBytes, kCommunication, kOwn,
  kHostBytes,    // host memory held for the rank's device outside its cap (kernels/host_ledger.h)
  kPeakByKind,   // kernels::kMemoryKinds figures from here: the peak's bytes by kind
  kFigureCount = kPeakByKind + kernels::kMemoryKinds
};

LossScaler loss_scaler_of(const JobPlan& plan) {
  if (plan.precision != models::Precision::Fp16) return {};
  const auto& n = plan.config.numerics;
  if (n.loss_scale > 0.0) return {LossScaler::Mode::Fixed, n.loss_scale, n.loss_scale_window};
  return {LossScaler::Mode::Dynamic, n.initial_loss_scale, n.loss_scale_window};
}

// "layers-0003-0007.safetensors": a chunk's file, named by the model layers it holds.
std::string chunk_file_name(const partition::StageRange& r) {
  char name[64];
  std::snprintf(name, sizeof name, "layers-%04d-%04d.safetensors", r.begin, r.end - 1);
  return name;
}

constexpr const char* kOptimizerPrefix = "optimizer/";

// Replica 0's values of `t` for every replica. An fp32 master built in host memory for a GPU
// (models::ParameterHome::Host; on cpu:0) passes through the device a piece of at most 4 MiB at a
// time: NCCL reads device memory, and the whole master has no room there.
void broadcast_from_replica_zero(dp::Collective& group, kernels::Tensor& t, kernels::Device device) {
  if (t.device() == device) {
    group.broadcast(t, 0);
    return;
  }
  const std::int64_t n = t.numel();
  const auto element = static_cast<std::int64_t>(kernels::dtype_size(t.dtype()));
  const std::int64_t piece = std::max<std::int64_t>(1, (std::int64_t{4} << 20) / element);
  kernels::Tensor buffer;
  {
    kernels::MemoryKindScope kind(kernels::MemoryKind::Communication);
    buffer = kernels::Tensor::empty({std::min(n, piece)}, t.dtype(), device);
  }
  for (std::int64_t at = 0; at < n; at += piece) {
    const std::int64_t len = std::min(piece, n - at);
    kernels::Tensor part = len == buffer.numel() ? buffer : buffer.view(0, {len});
    part.copy_elements_from(t, at, 0, len);
    group.broadcast(part, 0);
    t.copy_elements_from(part, 0, at, len);
  }
}



}  // namespace

Engine::Engine(std::shared_ptr<const JobPlan> plan, RankLinks& links, ParameterServers* servers)
    : shared_plan_(std::move(plan)), plan_(*shared_plan_), links_(links), servers_(servers) {
  PW_CHECK(plan_.uses_parameter_servers() == (servers_ != nullptr),
           "the job's model keeps " << plan_.server_tables.size() << " tables on parameter servers, but the engine was "
                                    << (servers_ ? "given" : "not given") << " servers");
  const auto& c = plan_.config;
  const auto startup = Clock::now() + millis(c.timeouts.startup_seconds);
  device_ = device_of_rank(c, links_.rank(), links_.world_size(), links_.world_kind(), links_.local_rank());
  auto& runtime = kernels::DeviceRuntime::get(device_);
  if (device_.is_cpu())
    runtime.set_threads(c.resources.threads > 0
                            ? c.resources.threads
                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / links_.ranks_on_host()));
  if (c.resources.device_memory > 0) runtime.set_memory_cap(c.resources.device_memory);
  kernels::set_math_mode({c.numerics.allow_tf32 ? kernels::Tf32::On : kernels::Tf32::Off,
                          c.numerics.deterministic ? kernels::Determinism::Deterministic
                                                   : kernels::Determinism::Fastest});

  const int P = plan_.schedule.stages;
  const int s = links_.stage();
  const int base = links_.replica() * P;
  std::set<int> neighbours;
  if (s > 0) neighbours.insert(base + s - 1);
  if (s + 1 < P) neighbours.insert(base + s + 1);
  for (int c = 0; c < plan_.schedule.chunks; ++c) {
    const int v = pipeline::virtual_stage(plan_.schedule, s, c);
    if (v > 0) neighbours.insert(base + stage_of_piece(v - 1));
    if (v + 1 < P * plan_.schedule.chunks) neighbours.insert(base + stage_of_piece(v + 1));
  }
  neighbours.erase(base + s);
  links_.connect(device_, neighbours, c.transport, startup);
  agree_on_config(startup);
  choose_partition(startup);
  // The model's state gets blocks of its own size: a cached free block (what profiling, building
  // the layers and the buckets let go of, or an earlier job on this device) serves a smaller request
  // (kernels/allocator.cpp), and would hold, and count as, up to twice the bytes of a gradient, a
  // 16-bit copy, a master segment or a state slice.
  auto fresh_blocks = [&runtime] { runtime.allocator().release_cache(); };
  fresh_blocks();
  auto built = build_stage();
  fresh_blocks();
  std::vector<models::Layer*> stage_layers;
  for (auto& chunk : built.chunks) {
    chunk->to(device_);
    chunk->set_precision(plan_.precision);
    stage_layers.push_back(chunk.get());
  }
  loss_scaler_ = loss_scaler_of(plan_);
  // Loaded before the broadcast, so replica 0's weights are everybody's.
  // One piece holds the whole model: the file must match it exactly, as on one device.
  const bool whole = plan_.schedule.stages * plan_.schedule.chunks == 1;
  if (!c.load_path.empty())
    models::load_weights(stage_layers, c.load_path, whole ? models::WeightCoverage::Whole : models::WeightCoverage::Part);
  if (plan_.replicas() > 1) {
    fresh_blocks();
    join_replicas(stage_layers, built.tied);
    fresh_blocks();   // the whole gradients and weights the buckets replaced; the state comes next
  }
  if (c.replicas.sync_batch_norm) synchronise_batch_norm(stage_layers);
  // With replicas, rows on parameter servers count in the clipping norm as the servers apply them:
  // the replicas of a stage show each other their rows every step (only when clipping: it costs
  // about one more push's traffic).
  auto server_rows = ServerRowsInNorm::Counted;
  if (plan_.replicas() > 1) {
    if (c.recovery.clip_grad_norm > 0.0 && remote_rows_->size() > 0) {
      const auto group = dp::Topology(P, plan_.replicas()).stage_group(stage());
      remote_rows_->set_replica_exchange([this, group](const std::vector<dp::PendingRows>& mine) {
        return exchange_pending_rows(links_.transport(), group, rank(), mine, row_exchanges_++,
                                     {kPendingKeys, kPendingRows}, deadline());
      });
    } else {
      server_rows = ServerRowsInNorm::LeftOut;
    }
  }
  step_guard_ = std::make_unique<StepGuard>(
      rank(), P, c.recovery.clip_grad_norm, server_rows,
      StepGuard::Exchange{
          [this](const std::vector<double>& values, std::int64_t round) { send_figures(values, kUpdateCheck, round); },
          [this](const std::vector<double>& values, std::int64_t round) {
            return collect_figures(values, kUpdateCheck, round);
          }});
  // The executor is made last, with every object it calls: they are members declared before it.
  built.config.gradient_sync = reducer_.get();
  built.config.update_check = step_guard_.get();
  built.config.update_validation = c.recovery.update_validation;
  built.config.remote_rows = remote_rows_.get();
  // A test's stall (FaultKind::Stall): the rank stops in the step's first forward until the job is
  // cancelled, so that every other rank times out waiting for it.
  built.config.before_instruction = [this](std::int64_t step, const pipeline::Instruction& in) {
    if (in.op != pipeline::OpType::Forward || in.micro_batch != 0 || in.chunk != 0) return;
    if (!injected_fault(FaultKind::Stall, step + 1, rank())) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::hours(1);
    while (!links_.cancel_token().cancelled() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // Stalled here to the end: the flight record shows this forward as where the rank stopped.
    throw AbortedError("stalled on purpose (FaultKind::Stall) until the job stopped: " +
                       links_.cancel_token().reason());
  };
  remote_rows_cancel_ = CancelSubscription(links_.cancel_token(), [r = remote_rows_.get()](const std::string& why) {
    r->abort(why);
  });
  executor_ = std::make_unique<pipeline::StageExecutor>(std::move(built.config), std::move(built.chunks),
                                                        plan_.optimizer, *pipeline_, std::move(built.tied));
  flight_registration_ = FlightRegistration({rank(), stage(), replica(), P, plan_.replicas(), plan_.schedule.chunks,
                                             &executor_->flight_recorder(),
                                             pipeline::to_text(executor_->config().program, true)});
  executor_->begin_step(step_);   // before the barrier: no peer sends a frame of it earlier
  links_.barrier("built", startup);
}

Engine::~Engine() {
  // A gather round still running writes into the layers' buffers, which go before the reducer.
  try {
    await_weights();
  } catch (...) {
  }
}

void Engine::after_recovery() { remote_rows_->reconnect(); }

// Ranks prove they run the same job: rank 0 publishes its config, the others compare hashes and,
// on a mismatch, name the first field that differs (and tell rank 0, which names it too).
void Engine::agree_on_config(rpc::Deadline deadline) {
  auto mine = to_json(plan_.config);
  // A schedule file is compared by what it says, not by its path.
  if (!plan_.programs.empty())
    mine["pipeline"]["schedule_file"] = pipeline::schedule_file_text(plan_.schedule, plan_.programs);
  const auto hash = config_hash(mine);
  auto& store = links_.store();
  if (rank() == 0) {
    store.set("job/config", mine.dump());
    for (int r = 1; r < links_.world_size(); ++r) {
      const auto verdict = links_.get("job/verdict/" + std::to_string(r), deadline);
      PW_INPUT_CHECK(verdict.empty(), "rank " << r << " runs another job than rank 0 (" << verdict
                                              << "); give every rank the same configuration");
    }
    return;
  }
  const auto theirs = nlohmann::json::parse(links_.get("job/config", deadline));
  std::string verdict;
  if (config_hash(theirs) != hash) {
    verdict = first_difference(theirs, mine);
    if (verdict.empty()) verdict = "the hashes differ";
    // Seen from rank 0: "here" is rank 0's value.
  }
  store.set("job/verdict/" + std::to_string(rank()), verdict);
  PW_INPUT_CHECK(verdict.empty(), "rank " << rank() << " runs another job than rank 0 ("
                                          << first_difference(mine, theirs)
                                          << "); give every rank the same configuration");
}

void Engine::choose_partition(rpc::Deadline deadline) {
  // Rank 0 chooses the split (the profile method measures layers once) and tells the others.
  if (rank() == 0) {
    // Profiling builds the layers, server-backed tables too.
    std::optional<models::RemoteTableScope> server_tables;
    if (servers_) server_tables.emplace(servers_->table_maker(plan_.config));
    partition_ = choose_split(plan_, device_);
    links_.store().set("job/split", split_text(partition_));
    return;
  }
  const auto text = links_.get("job/split", deadline);
  partition_ = partition::split_at(plan_.model.layer_count(),
                                   text.empty() ? std::vector<int>{} : partition::parse_split_points(text));
}

namespace {

RankMemory rank_memory_of(int rank, const std::vector<double>& f) {
  const auto kind = [&](kernels::MemoryKind k) {
    return static_cast<std::int64_t>(f[kPeakByKind + static_cast<std::size_t>(k)]);
  };
  RankMemory m;
  m.rank = rank;
  m.peak_bytes = static_cast<std::int64_t>(f[kPeak]);
  m.host_bytes = static_cast<std::int64_t>(f[kHostBytes]);
  m.parameters = kind(kernels::MemoryKind::Parameters);
  m.gradients = kind(kernels::MemoryKind::Gradients);
  m.master_weights = kind(kernels::MemoryKind::MasterWeights);
  m.optimizer_state = kind(kernels::MemoryKind::OptimizerState);
  m.activations = kind(kernels::MemoryKind::Activations);
  m.communication = kind(kernels::MemoryKind::Communication);
  m.workspace = kind(kernels::MemoryKind::Workspace);
  return m;
}

}  // namespace

Engine::BuiltStage Engine::build_stage() {
  const auto& model = plan_.model;
  const int P = plan_.schedule.stages;
  const int V = plan_.schedule.chunks;
  const int s = stage();
  partition::check_partition(partition_, model.layer_count());
  partition::check_tied(model);
  std::vector<int> members;
  for (int i = 0; i < P; ++i) members.push_back(replica() * P + i);
  pipeline_ = std::make_unique<rpc::SubgroupTransport>(links_.transport(), members, s);

  std::vector<std::unique_ptr<models::Sequential>> chunks;
  remote_rows_ = std::make_unique<dp::RemoteRowsRegistry>(replica());
  std::optional<models::RemoteTableScope> server_tables;
  if (servers_) server_tables.emplace(servers_->table_maker(plan_.config));
  // Under bf16/fp16 the fp32 weights are built in host memory where the steady state holds no whole
  // fp32 masters on the device: offloaded (they live on the host), and sharded over replicas (the
  // gradient buckets copy each replica's segment of them onto the device). Built on the device, they
  // took room the job never needs again: with their gradients and 16-bit copies 10 bytes a weight,
  // above the 2 + 4 + 12/R of sharded state from R = 4 on.
  const bool sharded_masters =
      plan_.buckets.optimizer_state == dp::OptimizerState::Sharded && plan_.replicas() > 1;
  const bool host_masters = plan_.precision != models::Precision::Fp32 &&
                            (plan_.optimizer.offload == models::OptimizerOffload::Host || sharded_masters);
  for (int chunk = 0; chunk < V; ++chunk) {
    models::LayerDeviceScope on_device(device_);
    models::ParameterHomeScope home(host_masters ? models::ParameterHome::Host : models::ParameterHome::Device);
    dp::RemoteRowsRegistry::BuildScope registering(*remote_rows_);
    const int piece = pipeline::virtual_stage(plan_.schedule, s, chunk);
    chunks.push_back(partition::build_stage(model, partition_[static_cast<std::size_t>(piece)], plan_.config.seed));
    chunks.back()->set_recomputed_children(plan_.recompute_layers);
  }
  // Tied weights: this stage's members of each group, the stages holding one, and the first
  // member's value for everybody (sent by its stage to the other holders).
  std::vector<pipeline::TiedGroup> tied(model.tied.size());
  const auto deadline = this->deadline();
  for (std::size_t g = 0; g < model.tied.size(); ++g) {
    const auto& spec = model.tied[g];
    const auto pieces = partition::tied_stages(model, partition_, spec);
    std::vector<int> owners;
    for (int v : pieces) owners.push_back(stage_of_piece(v));
    const int first_owner = owners.front();
    std::sort(owners.begin(), owners.end());
    owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
    tied[g].owner_stages = owners;
    for (const auto& name : spec.parameters)
      for (auto& chunk : chunks)
        for (auto& [pname, p] : chunk->named_parameters())
          if (pname == name) tied[g].local.push_back(p);
    if (tied[g].local.empty()) continue;
    kernels::Tensor first;
    const rpc::Tag tag{0, static_cast<int>(g), rpc::PayloadKind::Control, kTiedStart};
    if (s == first_owner) {
      for (auto& chunk : chunks)
        for (auto& [pname, p] : chunk->named_parameters())
          if (pname == spec.parameters.front()) first = p->value;
      for (int owner : owners)
        if (owner != s) pipeline_->send(owner, tag, first, deadline);
    } else {
      first = pipeline_->recv(first_owner, tag, deadline);   // copied into place, on the device or the host
    }
    for (auto* p : tied[g].local)
      if (p->value.raw() != first.raw()) p->value.copy_from(first);
  }

  pipeline::StageConfig config;
  config.spec = plan_.schedule;
  config.stage = s;
  config.device = device_;
  config.recompute = plan_.recompute_of(s);
  config.timeout = millis(plan_.config.timeouts.stage_seconds);
  config.replica = replica();
  config.loss = {plan_.objective, plan_.model.loss};
  if (!plan_.programs.empty()) config.program = plan_.programs.at(static_cast<std::size_t>(s));
  return {std::move(config), std::move(chunks), std::move(tied)};
}

// This stage's replicas average their gradients (Gloo or the job's links on CPU, NCCL on GPU) and start from
// replica 0's weights.
void Engine::join_replicas(const std::vector<models::Layer*>& stage_layers,
                           const std::vector<pipeline::TiedGroup>& tied) {
  const auto group = dp::Topology(plan_.schedule.stages, plan_.replicas()).stage_group(stage());
  collective_ = links_.make_collective(group, device_, "dp/stage" + std::to_string(stage()) + "/",
                                       millis(plan_.config.timeouts.stage_seconds),
                                       plan_.config.replicas.cpu_collectives);
  std::vector<models::Parameter*> parameters;   // in model order, as the executor's
  for (auto* layer : stage_layers) {
    for (auto& [name, p] : layer->named_parameters()) broadcast_from_replica_zero(*collective_, p->value, device_);
    for (auto& [name, b] : layer->named_buffers()) collective_->broadcast(b->value, 0);
    for (auto* p : layer->parameters()) parameters.push_back(p);
  }
  std::vector<models::Parameter*> tied_weights;
  for (const auto& group : tied) tied_weights.insert(tied_weights.end(), group.local.begin(), group.local.end());
  reducer_ = std::make_unique<dp::BucketReducer>(std::move(parameters), collective_, plan_.buckets,
                                                 dp::TraceTrack{stage(), replica()}, std::move(tied_weights));
  if (reducer_->update_share()) {
    // Sharded state: the running statistics travel ahead of the weight gathers on the reducer's
    // thread (the collective is that thread's while a gather runs) rather than after each step.
    std::vector<models::Buffer*> buffers;
    for (auto* layer : stage_layers)
      for (auto& [name, b] : layer->named_buffers()) buffers.push_back(b);
    reducer_->follow_replica_zero(std::move(buffers));
  }
  reducer_cancel_ = CancelSubscription(links_.cancel_token(), [r = reducer_.get()](const std::string& why) {
    r->abort(why);
  });
}

// Batch-norm layers take their statistics over the stage's replicas (a group of one: this rank's
// own, through the same code). Its own collective: the gradient reducer's runs on another thread.
void Engine::synchronise_batch_norm(const std::vector<models::Layer*>& stage_layers) {
  std::vector<models::BatchNorm2d*> layers_with_statistics;
  for (auto* layer : stage_layers) {
    auto found = models::batch_norms_in(*layer);
    layers_with_statistics.insert(layers_with_statistics.end(), found.begin(), found.end());
  }
  if (layers_with_statistics.empty()) return;
  models::BatchNorm2d::GroupSum sum = [](kernels::Tensor&) {};
  if (plan_.replicas() > 1) {
    const auto group = dp::Topology(plan_.schedule.stages, plan_.replicas()).stage_group(stage());
    batch_norm_group_ = links_.make_collective(group, device_, "sbn/stage" + std::to_string(stage()) + "/",
                                               millis(plan_.config.timeouts.stage_seconds),
                                               plan_.config.replicas.cpu_collectives);
    batch_norm_cancel_ = CancelSubscription(links_.cancel_token(),
                                            [g = batch_norm_group_](const std::string&) { g->cancel(); });
    sum = [g = batch_norm_group_](kernels::Tensor& values) { g->allreduce_sum(values, dp::Compression::None); };
  }
  for (auto* bn : layers_with_statistics) bn->set_group_sum(sum);
}

// Running statistics (batch-norm) follow replica 0 after every step, as DDP's broadcast_buffers:
// evaluation and saving then give the same result on any replica.
void Engine::sync_buffers() {
  if (reducer_ && reducer_->update_share()) return;   // they follow with the weights' gather
  std::vector<models::Buffer*> buffers;
  for (auto* layer : layers())
    for (auto& [name, b] : layer->named_buffers()) buffers.push_back(b);
  dp::broadcast_buffers(*collective_, buffers, 0);
}

models::data::DataParts Engine::data_parts() const {
  const int last = pipeline::loss_stage(plan_.schedule);
  const bool inputs = stage() == 0;
  const bool labels = stage() == last;
  using models::data::DataParts;
  return inputs && labels ? DataParts::Both : inputs ? DataParts::Inputs : labels ? DataParts::Labels : DataParts::None;
}

kernels::DType Engine::loader_input_dtype() const {
  if (plan_.precision == models::Precision::Fp32 || !models::data::reads_inputs(data_parts())) return kernels::DType::F32;
  return executor_->chunk(0).input_rounding() == models::Layer::InputRounding::ToActivationDtype
             ? models::activation_dtype(plan_.precision)
             : kernels::DType::F32;
}

rpc::Deadline Engine::deadline() const {
  return std::chrono::steady_clock::now() + millis(plan_.config.timeouts.stage_seconds);
}

std::vector<models::Layer*> Engine::layers() {
  std::vector<models::Layer*> out;
  for (int c = 0; c < executor_->chunk_count(); ++c) out.push_back(&executor_->chunk(c));
  return out;
}

std::vector<std::vector<double>> Engine::exchange(const std::vector<double>& values, int message, std::int64_t round) {
  send_figures(values, message, round);
  return collect_figures(values, message, round);
}

void Engine::send_figures(const std::vector<double>& values, int message, std::int64_t round) {
  const rpc::Tag tag{round, message, rpc::PayloadKind::Control, 0};
  const auto payload = doubles_tensor(values);
  int peer = 0;
  try {
    for (peer = 0; peer < links_.world_size(); ++peer)
      if (peer != rank()) links_.transport().send(peer, tag, payload, deadline());
  } catch (...) {
    rethrow_exchange_failure(message, round, peer);
  }
}

std::vector<std::vector<double>> Engine::collect_figures(const std::vector<double>& values, int message,
                                                         std::int64_t round) {
  const rpc::Tag tag{round, message, rpc::PayloadKind::Control, 0};
  std::vector<std::vector<double>> all(static_cast<std::size_t>(links_.world_size()));
  int peer = 0;
  try {
    for (peer = 0; peer < links_.world_size(); ++peer)
      all[static_cast<std::size_t>(peer)] =
          peer == rank() ? values
                         : tensor_doubles(links_.transport().recv(peer, tag, deadline()), values.size(),
                                          "figures from rank " + std::to_string(peer));
  } catch (...) {
    rethrow_exchange_failure(message, round, peer);
  }
  return all;
}

void Engine::rethrow_exchange_failure(int message, std::int64_t round, int peer) {
  std::ostringstream context;
  context << "stage " << stage() << " (" << device_.str() << "), step " << round << ", exchanging "
          << (message == kStepFigures     ? "the step's figures"
              : message == kUpdateCheck   ? "whether its gradients are finite"
              : message == kPushesDone    ? "that its embedding pushes are answered"
              : message == kWeightsFinite ? "whether its weights are finite"
                                          : "the evaluation's figures")
          << " with rank " << peer << ": ";
  pipeline::rethrow_with_context(context.str());
}

StepOutcome Engine::step(const models::data::Batch& local, double primary_flags) {
  const auto entered = std::chrono::steady_clock::now();
  const double gap = last_step_end_ ? std::chrono::duration<double>(entered - *last_step_end_).count() : 0.0;
  const int M = plan_.schedule.micro_batches;
  pipeline::MicroBatchInputs inputs;
  inputs.images = local.images.defined() ? pipeline::split_batch(local.images, M)
                                         : std::vector<kernels::Tensor>(static_cast<std::size_t>(M));
  if (local.labels.defined()) {
    inputs.labels = pipeline::split_batch(local.labels, M);
  } else {
    for (int m = 0; m < M; ++m) inputs.labels.push_back(kernels::Tensor::empty({0}, kernels::DType::I64));
  }
  const std::int64_t step = step_++;
  const double loss_scale = loss_scaler_.scale();
  executor_->set_loss_scale(loss_scale);
  step_guard_->set_loss_scale(loss_scale);
  last_ = executor_->run_step(step, inputs);
  const auto& mine = last_;
  if (collective_) sync_buffers();
  const auto memory = kernels::DeviceRuntime::get(device_).allocator().stats();
  const auto peak = memory.peak_in_use;
  static_assert(trace::kMemoryKindSlots == kernels::kMemoryKinds, "a memory sample holds every kind");
  trace::MemorySample sample;   // the trace's memory counter track (kept for traced steps only)
  sample.stage = static_cast<std::int16_t>(stage());
  sample.replica = static_cast<std::int16_t>(replica());
  sample.step = step;
  sample.time_ns = trace::now_ns();
  std::copy(memory.in_use_by_kind.begin(), memory.in_use_by_kind.end(), sample.in_use.begin());
  std::copy(memory.peak_by_kind.begin(), memory.peak_by_kind.end(), sample.peak.begin());
  trace::MemoryTrace::global().record(sample);
  std::vector<double> figures(kFigureCount, 0.0);
  for (std::size_t k = 0; k < kernels::kMemoryKinds; ++k)
    figures[kPeakByKind + k] = static_cast<double>(memory.peak_by_kind[k]);
  figures[kLoss] = mine.loss_sum;
  figures[kCorrect] = static_cast<double>(mine.correct);
  figures[kSamples] = static_cast<double>(mine.samples);
  figures[kBusy] = mine.busy_seconds;
  figures[kPeak] = static_cast<double>(peak);
  figures[kHostBytes] = static_cast<double>(kernels::host_memory_stats(device_).in_use);
  if (reducer_) {
    const auto stats = reducer_->stats();
    figures[kBuckets] = static_cast<double>(stats.buckets);
    figures[kExposed] = stats.exposed_seconds;
  }
  figures[kFlags] = primary_flags;
  figures[kBoundaryBytes] = static_cast<double>(mine.boundary_bytes);
  figures[kCommunication] = mine.communication_seconds;
  figures[kOwn] = mine.busy_seconds + gap;
  const auto all = exchange(figures, kStepFigures, step);
  StepOutcome r;
  const int P = plan_.schedule.stages;
  const int R = plan_.replicas();
  r.stage_busy_seconds.assign(static_cast<std::size_t>(P), 0.0);
  r.stage_communication_seconds.assign(static_cast<std::size_t>(P), 0.0);
  r.rank_own_seconds.assign(all.size(), 0.0);
  r.stage_peak_memory.assign(static_cast<std::size_t>(P), 0);
  if (R > 1) r.gradient_buckets.assign(static_cast<std::size_t>(P), 0);
  double loss_sum = 0.0;
  for (std::size_t rank = 0; rank < all.size(); ++rank) {
    const auto& f = all[rank];
    const auto s = rank % static_cast<std::size_t>(P);
    loss_sum += f[kLoss];
    r.correct += static_cast<std::int64_t>(f[kCorrect]);
    r.samples += static_cast<std::int64_t>(f[kSamples]);
    r.stage_busy_seconds[s] += f[kBusy] / static_cast<double>(R);
    r.stage_communication_seconds[s] += f[kCommunication] / static_cast<double>(R);
    r.rank_own_seconds[rank] = f[kOwn];
    r.stage_peak_memory[s] = std::max(r.stage_peak_memory[s], static_cast<std::int64_t>(f[kPeak]));
    r.rank_memory.push_back(rank_memory_of(static_cast<int>(rank), f));
    if (R > 1 && rank < static_cast<std::size_t>(P)) r.gradient_buckets[s] = static_cast<std::int64_t>(f[kBuckets]);
    r.allreduce_exposed_seconds = std::max(r.allreduce_exposed_seconds, f[kExposed]);
    r.boundary_bytes += static_cast<std::int64_t>(f[kBoundaryBytes]);
  }
  r.loss = r.samples > 0 ? loss_sum / static_cast<double>(r.samples) : 0.0;
  r.primary_flags = all.front()[kFlags];
  r.skipped = executor_->last_update().action == pipeline::UpdateAction::Skip;
  r.nonfinite_rank = step_guard_->last_nonfinite_rank();
  r.gradient_norm = step_guard_->last_gradient_norm();
  r.loss_scale = loss_scale;
  // Every rank saw the same verdict, so every scaler moves alike.
  r.overflow = r.skipped && step_guard_->last_loss_finite() && loss_scaler_.absorbs_overflow();
  // A non-finite loss is the model's fault, not the scale's: it neither halves nor counts as good.
  if (!r.skipped) loss_scaler_.update(false);
  else if (step_guard_->last_loss_finite()) loss_scaler_.update(true);
  last_step_end_ = std::chrono::steady_clock::now();
  return r;
}

models::EvalResult Engine::evaluate(EvalFeed& feed) {
  last_step_end_.reset();   // the next step's gap would count this, which waits for other ranks
  const int V = plan_.schedule.chunks;
  const int last = plan_.schedule.stages * V - 1;
  const std::int64_t round = evaluations_++;
  await_weights();
  double loss_sum = 0.0, correct = 0.0, samples = 0.0, top5 = 0.0;
  const bool scored = plan_.objective == models::Objective::BinaryCrossEntropy;
  const bool ranked = plan_.objective == models::Objective::SoftmaxCrossEntropy && !plan_.model.loss;
  std::vector<double> scores, score_labels;   // binary objective: for the AUC, gathered at rank 0
  if (servers_) {
    // Pushes leave in the background: every rank's must be answered before any rank reads the
    // tables, so evaluation sees every trained step (sync: applied) whatever the threads' timing.
    executor_->flush_remote();
    exchange({0.0}, kPushesDone, round);
  }
  feed.restart();
  for (auto* layer : layers()) layer->refresh_compute_copies();
  // Activations travel stage to stage as in training; replica r takes test batches r, r + R, ...
  while (auto next = feed.next()) {
    const auto& [b, batch] = *next;
    kernels::Tensor carried;   // a V schedule's turn: the next piece is on this stage
    for (int c = 0; c < V; ++c) {
      const int v = pipeline::virtual_stage(plan_.schedule, stage(), c);
      const rpc::Tag in_tag{round, static_cast<int>(b), rpc::PayloadKind::Evaluation, v};
      kernels::Tensor x = v == 0              ? batch.images.to(device_)
                          : carried.defined() ? std::exchange(carried, kernels::Tensor())
                                              : pipeline_->recv(stage_of_piece(v - 1), in_tag, deadline()).to(device_);
      kernels::Tensor y = executor_->chunk(c).forward(x, models::Mode::Eval).y;
      if (v == last) {
        const auto labels = batch.labels.to(y.device());
        const auto loss = models::compute_loss(models::Loss{plan_.objective, plan_.model.loss}, y, labels, 1.0);
        loss_sum += loss.loss * static_cast<double>(labels.numel());
        correct += static_cast<double>(loss.correct);
        samples += static_cast<double>(labels.numel());
        if (ranked) top5 += static_cast<double>(models::top_k_hits(y, labels, 5));
        if (scored) {
          const auto z = y.to_double_vector();
          scores.insert(scores.end(), z.begin(), z.end());
          for (auto label : labels.to_int_vector()) score_labels.push_back(static_cast<double>(label));
        }
      } else if (stage_of_piece(v + 1) == stage()) {
        carried = y;
      } else {
        pipeline_->send(stage_of_piece(v + 1), rpc::Tag{round, static_cast<int>(b), rpc::PayloadKind::Evaluation, v + 1},
                        y, deadline());
      }
    }
  }
  const auto all = exchange({loss_sum, correct, samples, top5}, kEvalFigures, round);
  double f[4] = {0.0, 0.0, 0.0, 0.0};
  for (std::size_t rank = 0; rank < all.size(); ++rank)
    if (static_cast<int>(rank) % plan_.schedule.stages == pipeline::loss_stage(plan_.schedule))   // the last stage of each replica
      for (int i = 0; i < 4; ++i) f[i] += all[rank][static_cast<std::size_t>(i)];
  models::EvalResult r;
  r.samples = static_cast<std::int64_t>(f[2]);
  if (r.samples > 0) {
    r.loss = f[0] / f[2];
    r.accuracy = f[1] / f[2];
    if (ranked) r.top5_accuracy = f[3] / f[2];
  }
  if (scored) r.auc = gather_auc(all, scores, score_labels, round);
  return r;
}

bool Engine::weights_finite() {
  await_weights();
  std::vector<kernels::Tensor> values;
  for (auto* layer : layers())
    for (auto& [name, p] : layer->named_parameters()) values.push_back(p->value);
  bool finite = true;
  for (double v : kernels::sums_of_squares(values)) finite = finite && std::isfinite(v);
  const auto all = exchange({finite ? 1.0 : 0.0}, kWeightsFinite, weight_checks_++);
  for (const auto& figures : all)
    if (figures.front() == 0.0) return false;
  return true;
}

// The last stage of every replica sends rank 0 its scores and labels; rank 0 ranks them all
// (-1 elsewhere, and when the test set holds one class only).
double Engine::gather_auc(const std::vector<std::vector<double>>& figures, std::vector<double> scores,
                          const std::vector<double>& labels, std::int64_t round) {
  const int P = plan_.schedule.stages;
  const int last = pipeline::loss_stage(plan_.schedule);
  const rpc::Tag tag{round, kEvalScores, rpc::PayloadKind::Control, 0};
  auto& control = links_.transport();
  const bool is_last = stage() == last;
  if (rank() != 0) {
    if (is_last) {
      std::vector<double> both = scores;
      both.insert(both.end(), labels.begin(), labels.end());
      control.send(0, tag, doubles_tensor(both), deadline());
    }
    return -1.0;
  }
  std::vector<std::int64_t> all_labels;
  if (is_last) all_labels.assign(labels.begin(), labels.end());
  else scores.clear();
  for (std::size_t rank = 1; rank < figures.size(); ++rank) {
    if (static_cast<int>(rank) % P != last) continue;
    const auto n = static_cast<std::size_t>(figures[rank][2]);
    const auto both = tensor_doubles(control.recv(static_cast<int>(rank), tag, deadline()), 2 * n,
                                     "evaluation scores from rank " + std::to_string(rank));
    scores.insert(scores.end(), both.begin(), both.begin() + static_cast<std::ptrdiff_t>(n));
    for (std::size_t i = n; i < 2 * n; ++i) all_labels.push_back(static_cast<std::int64_t>(both[i]));
  }
  const auto positives = std::count(all_labels.begin(), all_labels.end(), std::int64_t{1});
  if (positives == 0 || positives == static_cast<std::int64_t>(all_labels.size())) return -1.0;
  return models::roc_auc(scores, all_labels);
}

// Rank 0 collects every stage's parameters and buffers of replica 0 by whole-model name.
namespace {
// A host copy counted against no device's cap: a whole model gathered by rank 0 (to save it, or
// staged for a checkpoint) must not land on rank 0's device, which holds one stage at most.
kernels::Tensor outside_device_caps(const kernels::Tensor& t) {
  auto copy = kernels::Tensor::empty_pinned(t.shape(), t.dtype());
  copy.copy_from(t);
  return copy;
}
}  // namespace

kernels::NamedTensors Engine::gather_weights() {
  await_weights();
  const std::int64_t round = gathers_++;
  const auto masters = gather_masters();   // every replica takes part
  if (replica() != 0) return {};   // replicas hold the same weights and buffers as replica 0
  std::vector<std::pair<std::string, kernels::Tensor>> mine;
  for (auto* layer : layers()) {
    for (auto& [name, p] : layer->named_parameters()) {
      const auto master = masters.find(name);
      mine.emplace_back(name, master != masters.end() ? master->second : p->value);
    }
    for (auto& [name, b] : layer->named_buffers()) mine.emplace_back(name, b->value);
  }
  auto& control = links_.transport();
  if (stage() != 0) {
    // Names first (one per line, as bytes), then the tensors in the same order.
    std::string names;
    for (const auto& [name, t] : mine) names += name + "\n";
    auto text = kernels::Tensor::empty({static_cast<std::int64_t>(names.size())}, kernels::DType::U8,
                                       kernels::Device::cpu(0));
    std::memcpy(text.raw(), names.data(), names.size());
    control.send(0, rpc::Tag{round, kWeightNames, rpc::PayloadKind::Control, 0}, text, deadline());
    for (std::size_t i = 0; i < mine.size(); ++i)
      control.send(0, rpc::Tag{round, kFirstWeight + static_cast<int>(i), rpc::PayloadKind::Control, 0},
                   mine[i].second, deadline());
    return {};
  }
  kernels::NamedTensors all;
  for (auto& [name, t] : mine) all.emplace(name, outside_device_caps(t));
  for (int r = 1; r < plan_.schedule.stages; ++r) {
    const auto text = control.recv(r, rpc::Tag{round, kWeightNames, rpc::PayloadKind::Control, 0}, deadline());
    PW_CHECK(text.dtype() == kernels::DType::U8, "weight names from rank " << r << " are " << text.describe());
    std::istringstream names(std::string(static_cast<const char*>(text.to(kernels::Device::cpu(0)).raw()), text.nbytes()));
    std::string name;
    for (int i = 0; std::getline(names, name); ++i) {
      auto t = control.recv(r, rpc::Tag{round, kFirstWeight + i, rpc::PayloadKind::Control, 0}, deadline());
      // A tied weight is held by several stages with equal values: the first copy stands.
      all.emplace(name, outside_device_caps(t));
    }
  }
  return all;
}

void Engine::save(const std::string& path) {
  last_step_end_.reset();   // the next step's gap would count this, which waits for other ranks
  auto tensors = gather_weights();
  if (rank() == 0) models::save_named_weights(tensors, path, plan_.model.name);
}

std::map<std::string, kernels::Tensor> Engine::gather_sharded_state() const {
  std::map<std::string, kernels::Tensor> out;
  if (!reducer_ || !reducer_->update_share()) return out;
  auto& optimizer = executor_->optimizer();
  std::map<models::Parameter*, std::string> names;
  for (int c = 0; c < executor_->chunk_count(); ++c)
    for (auto& [name, p] : executor_->chunk(c).named_parameters()) names.emplace(p, name);
  const auto suffixes = optimizer.state_suffixes();
  for (std::size_t k = 0; k < suffixes.size(); ++k) {
    auto whole = reducer_->gather_sharded([&](models::Parameter* p) -> kernels::Tensor {
      const auto state = optimizer.slice_state(p);
      return state.empty() ? kernels::Tensor() : *state.at(k);
    });
    for (auto& [p, t] : whole) out.emplace(names.at(p) + suffixes[k], std::move(t));
  }
  return out;
}

std::map<std::string, kernels::Tensor> Engine::gather_masters() const {
  std::map<std::string, kernels::Tensor> out;
  std::map<models::Parameter*, std::string> names;
  for (int c = 0; c < executor_->chunk_count(); ++c)
    for (auto& [name, p] : executor_->chunk(c).named_parameters()) names.emplace(p, name);
  if (reducer_ && reducer_->update_share())
    for (auto& [p, t] : reducer_->gather_masters()) out.emplace(names.at(p), std::move(t));
  // Offloaded, a weight updated whole keeps its master in host memory, whole already.
  auto& optimizer = executor_->optimizer();
  for (const auto& [p, name] : names) {
    const auto master = optimizer.master_of(p);
    if (master && !optimizer.slice_of(p)) out.emplace(name, master->master);
  }
  return out;
}

void Engine::restore_sharded_state(const std::vector<std::pair<std::string, models::Parameter*>>& named,
                                   const std::function<kernels::Tensor(const std::string&)>& whole_state) {
  auto& optimizer = executor_->optimizer();
  const auto suffixes = optimizer.state_suffixes();
  // A stored tensor of `p`'s shape in `dtype` (fp32: the state and the masters are).
  auto checked = [&](const std::string& stored_name, const models::Parameter* p, kernels::DType dtype) {
    const kernels::Tensor whole = whole_state(stored_name);
    PW_INPUT_CHECK(whole.shape() == p->value.shape() && whole.dtype() == dtype,
                   "checkpoint tensor '" << stored_name << "' is " << whole.describe() << ", this model's parameter is "
                                         << kernels::shape_str(p->value.shape()) << " " << kernels::dtype_name(dtype));
    return whole;
  };
  // Copied across devices element by element: a whole stored tensor never lands on the device.
  for (const auto& [name, p] : named) {
    if (const auto m = optimizer.master_of(p)) {
      auto master = m->master;
      master.copy_elements_from(checked(name, p, master.dtype()), m->offset, 0, m->length);
    }
    const auto slice = optimizer.slice_of(p);
    if (!slice) continue;
    const auto master_dtype = slice->master.defined() ? slice->master.dtype() : p->value.dtype();
    const auto state = optimizer.slice_state(p);
    for (std::size_t k = 0; k < suffixes.size(); ++k) {
      const kernels::Tensor whole = checked(kOptimizerPrefix + name + suffixes[k], p, master_dtype);
      state[k]->copy_elements_from(whole, slice->offset, 0, slice->length);
    }
  }
}

std::vector<CheckpointPart> Engine::checkpoint_parts(std::vector<CheckpointPart> reuse) const {
  last_step_end_.reset();   // the next step's gap would count this, which waits for other ranks
  await_weights();
  // Sharded optimizer state is gathered whole (every replica takes part), so that a checkpoint
  // holds the same tensors however the job kept its state.
  auto sharded_state = gather_sharded_state();
  const auto masters = gather_masters();   // the fp32 weights stand for the 16-bit ones
  if (replica() != 0) return {};
  std::map<std::string, kernels::Tensor> staging;   // by file/tensor
  for (auto& part : reuse)
    for (auto& [name, t] : part.tensors) staging.emplace(part.name + "/" + name, std::move(t));
  auto host_copy = [&](const std::string& file, const std::string& name, const kernels::Tensor& t) {
    const auto it = staging.find(file + "/" + name);
    if (it == staging.end() || it->second.shape() != t.shape() || it->second.dtype() != t.dtype())
      return outside_device_caps(t);
    it->second.copy_from(t);
    return it->second;
  };
  auto& executor = *executor_;
  auto& optimizer = executor.optimizer();
  std::vector<CheckpointPart> parts;
  for (int c = 0; c < executor.chunk_count(); ++c) {
    CheckpointPart part;
    part.name = chunk_file_name(partition_[static_cast<std::size_t>(pipeline::virtual_stage(plan_.schedule, stage(), c))]);
    auto& chunk = executor.chunk(c);
    const auto named = chunk.named_parameters();
    for (const auto& [name, p] : named) {
      const auto master = masters.find(name);
      part.tensors.emplace(name, host_copy(part.name, name, master != masters.end() ? master->second : p->value));
    }
    for (const auto& [name, t] : optimizer.named_state(named))
      part.tensors.emplace(kOptimizerPrefix + name, host_copy(part.name, kOptimizerPrefix + name, *t));
    for (const auto& [name, p] : named)
      for (const auto& suffix : optimizer.state_suffixes()) {
        const auto it = sharded_state.find(name + suffix);
        if (it != sharded_state.end())
          part.tensors.emplace(kOptimizerPrefix + it->first, host_copy(part.name, kOptimizerPrefix + it->first, it->second));
      }
    for (auto& [name, b] : chunk.named_buffers()) part.tensors.emplace(name, host_copy(part.name, name, b->value));
    part.metadata = {{"format", "pt"},
                     {"pipewright_model", plan_.model.name},
                     {"optimizer", models::optimizer_kind_name(optimizer.config().kind)},
                     {"optimizer_steps", std::to_string(optimizer.steps())},
                     {"precision", models::precision_name(plan_.precision)}};
    if (loss_scaler_.mode() == LossScaler::Mode::Dynamic) {
      part.metadata.emplace("loss_scale", std::to_string(loss_scaler_.scale()));
      part.metadata.emplace("loss_scale_good_steps", std::to_string(loss_scaler_.good_steps()));
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

void Engine::restore(const CheckpointManifest& m) {
  last_step_end_.reset();   // the next step's gap would count this, which waits for other ranks
  await_weights();   // no gather may land on what is restored
  // Which file holds each tensor; a tied weight's copies are equal, the first file stands.
  std::map<std::string, const CheckpointFile*> where;
  for (const auto& f : m.files)
    for (const auto& t : f.tensors) where.emplace(t, &f);
  std::vector<std::pair<std::string, models::Parameter*>> named;
  std::vector<std::pair<std::string, kernels::Tensor*>> wanted;
  for (auto* layer : layers()) {
    for (auto& [name, p] : layer->named_parameters()) {
      named.emplace_back(name, p);
      wanted.emplace_back(name, &p->value);
    }
    for (auto& [name, b] : layer->named_buffers()) wanted.emplace_back(name, &b->value);
  }
  for (auto& [name, t] : executor_->optimizer().named_state(named)) wanted.emplace_back(kOptimizerPrefix + name, t);
  std::map<std::string, kernels::NamedTensors> loaded;   // by file
  std::optional<std::int64_t> optimizer_steps;
  std::optional<std::pair<double, std::int64_t>> loss_scale;
  // The stored tensor called `name` (its file loaded and verified once).
  auto stored = [&](const std::string& name) -> std::pair<const CheckpointFile*, const kernels::Tensor*> {
    const auto at = where.find(name);
    PW_INPUT_CHECK(at != where.end(), "checkpoint " << m.folder << " holds no tensor '" << name
                                                    << "' (is it a checkpoint of this model, " << plan_.model.name << "?)");
    const CheckpointFile& file = *at->second;
    auto it = loaded.find(file.name);
    if (it == loaded.end()) {
      verify_file(m.folder, file);
      std::map<std::string, std::string> metadata;
      it = loaded.emplace(file.name, kernels::load_safetensors(m.folder + "/" + file.name, &metadata)).first;
      if (metadata.count("optimizer_steps")) optimizer_steps = std::stoll(metadata.at("optimizer_steps"));
      if (metadata.count("loss_scale") && metadata.count("loss_scale_good_steps"))
        loss_scale = std::pair{std::stod(metadata.at("loss_scale")), std::stoll(metadata.at("loss_scale_good_steps"))};
    }
    const auto t = it->second.find(name);
    PW_INPUT_CHECK(t != it->second.end(), "checkpoint file '" << m.folder << "/" << file.name << "' lacks '" << name
                                                              << "' that its manifest lists");
    return {&file, &t->second};
  };
  // Sharded optimizer state: this replica's slices of the whole tensors stored.
  restore_sharded_state(named, [&](const std::string& name) { return *stored(name).second; });
  for (const auto& [name, target] : wanted) {
    const auto [file, t] = stored(name);
    // A weight kept in 16 bits with fp32 masters apart (sharded, or offloaded) is stored as its
    // fp32 master: the 16-bit weights are its rounding, as a compute copy is (the masters were
    // restored above).
    const bool rounded = kernels::is_half(target->dtype()) && t->dtype() == kernels::DType::F32;
    PW_INPUT_CHECK(t->shape() == target->shape() && (t->dtype() == target->dtype() || rounded),
                   "checkpoint file '" << m.folder << "/" << file->name << "': '" << name << "' is "
                                       << t->describe() << ", this model's is " << target->describe());
    // Straight from the loaded (host) tensor, rounded in host memory where it must be: no whole
    // stored tensor takes room on a device whose cap the job's steady state may just fit.
    if (rounded) {
      auto weights = kernels::Tensor::empty_host(target->shape(), target->dtype(), device_);
      kernels::host_round(*t, weights);
      target->copy_from(weights);
    } else {
      target->copy_from(*t);
    }
  }
  if (optimizer_steps) executor_->optimizer().set_steps(*optimizer_steps);
  if (loss_scale) loss_scaler_.restore(loss_scale->first, loss_scale->second);
  set_lr(m.lr);
  step_ = m.step;
  executor_->begin_step(step_);   // the barriers after a restore come before any frame of this step
  remote_rows_->reconnect();
}

void Engine::set_lr(double lr) { executor_->optimizer().set_lr(lr); }
double Engine::lr() const { return executor_->optimizer().config().lr; }

void Engine::reset_peak_memory() { kernels::DeviceRuntime::get(device_).allocator().reset_peak(); }
void Engine::await_weights() const {
  if (reducer_) reducer_->await_all_weights(deadline());
}

void Engine::synchronize() {
  await_weights();
  executor_->flush_remote();
  kernels::current_stream(device_).synchronize();
}

void Engine::prefetch(const models::data::Batch& next_local) {
  if (!servers_ || !next_local.images.defined()) return;
  executor_->prefetch_remote(pipeline::split_batch(next_local.images, plan_.schedule.micro_batches));
}

std::string Engine::describe() const {
  std::ostringstream out;
  out << "rank " << rank() << " of " << links_.world_size() << ": stage " << stage() << " of "
      << plan_.schedule.stages;
  if (plan_.replicas() > 1) out << ", replica " << replica() << " of " << plan_.replicas();
  out << " on " << device_.str();
  return out.str();
}

}  // namespace pw::train
