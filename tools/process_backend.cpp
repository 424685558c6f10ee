// `pipewright train` as one rank of a multi-process job: this process runs one pipeline stage,
// rank 0 also runs the rendezvous, and a heartbeat ends the job on every rank as soon as one
// rank fails, dies or stops answering.
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "core/clock.h"
#include "core/trace.h"
#include "core/units.h"
#include "kernels/runtime.h"
#include "kernels/safetensors.h"
#include "kernels/stream.h"
#include "models/checkpoint.h"
#include "pipeline/process_stage.h"
#include "rpc/nccl_transport.h"
#include "rpc/rendezvous_client.h"
#include "rpc/rendezvous_server.h"
#include "rpc/routing_transport.h"
#include "rpc/subgroup_transport.h"
#include "dataparallel/bucket_reducer.h"
#include "dataparallel/gloo_collective.h"
#include "dataparallel/nccl_collective.h"
#include "dataparallel/topology.h"
#include "rpc/thrift_transport.h"
#include "tools/pipeline_setup.h"
#include "tools/train_backend.h"

namespace pw::tools {
namespace {

using std::chrono::milliseconds;

milliseconds millis(double seconds) { return milliseconds(static_cast<std::int64_t>(seconds * 1000.0)); }

enum class TransportKind { Thrift, Nccl };

const char* transport_name(TransportKind kind) { return kind == TransportKind::Nccl ? "nccl" : "thrift"; }

// The transport of the link between this rank (on `self`) and a peer (on `peer`): NCCL when both
// ends are GPUs (auto), Thrift otherwise; --transport forces one for every link.
TransportKind link_transport(const std::string& flag, kernels::Device self, kernels::Device peer, int peer_rank) {
  if (flag == "thrift") return TransportKind::Thrift;
  if (flag == "nccl") {
    PW_INPUT_CHECK(self.is_cuda() && peer.is_cuda(),
                   "--transport nccl moves tensors between GPUs, but the link to rank "
                       << peer_rank << " joins " << self.str() << " and " << peer.str()
                       << "; use --transport auto (Thrift for links with a CPU end) or thrift");
    return TransportKind::Nccl;
  }
  PW_INPUT_CHECK(flag == "auto", "--transport " << flag << " is not available in a multi-process job (ranks are "
                                                << "separate processes); use auto, thrift or nccl");
  return self.is_cuda() && peer.is_cuda() ? TransportKind::Nccl : TransportKind::Thrift;
}

// This rank's device: its entry of --devices, else its local GPU for --device cuda, else cpu:0.
kernels::Device device_of_rank(const TrainOptions& o, const rpc::LaunchEnv& env, int stages) {
  if (!o.devices.empty()) return parse_devices(o, stages)[static_cast<std::size_t>(env.rank)];
  const auto base = kernels::Device::parse(o.device);
  if (base.is_cpu()) return kernels::Device::cpu(0);
  const int gpus = kernels::cuda_device_count();
  PW_INPUT_CHECK(gpus > 0, "--device " << o.device << ": this machine has no CUDA device; use --device cpu:0");
  return kernels::Device::cuda(env.local_rank % gpus);
}

// The flags every rank must agree on (outputs such as --summary and --save are rank 0's business).
std::string shared_flags(const TrainOptions& o) {
  std::ostringstream out;
  out << "--model " << o.model << " --dataset " << o.dataset << " --synthetic-shape " << o.synthetic_shape
      << " --synthetic-size " << o.synthetic_size << " --width " << o.width << " --epochs " << o.epochs << " --steps "
      << o.steps << " --batch-size " << o.batch_size << " --lr " << o.lr << " --optimizer " << o.optimizer
      << " --momentum " << o.momentum << " --weight-decay " << o.weight_decay << " --seed " << o.seed
      << " --eval-batches " << o.eval_batches << " --stages " << o.stages << " --micro-batches " << o.micro_batches
      << " --schedule " << o.schedule << " --chunks " << o.chunks << " --split '" << o.split << "' --partition "
      << o.partition << " --recompute " << o.recompute << " --transport " << o.transport << " --replicas " << o.replicas
      << " --bucket-size " << o.bucket_size << " --grad-compression " << o.grad_compression;
  return out.str();
}

std::string split_points_text(const partition::Partition& p) {
  std::ostringstream out;
  for (std::size_t i = 1; i < p.size(); ++i) out << (i > 1 ? "," : "") << p[i].begin;
  return out.str();
}

class ProcessBackend : public TrainBackend {
 public:
  ProcessBackend(const TrainOptions& o, const models::ModelSpec& spec, const models::OptimizerConfig& oc,
                 const rpc::LaunchEnv& env)
      : env_(env) {
    try {
      start(o, spec, oc);
    } catch (const std::exception& e) {
      // The destructor will not run: tell the others why, and keep rank 0's rendezvous up long
      // enough for them to hear it.
      abandon(e.what());
      heartbeat_.reset();
      if (rendezvous_) rendezvous_->wait_until_all_left(std::min(milliseconds(3000), heartbeat_timeout_));
      throw;
    }
  }

  void start(const TrainOptions& o, const models::ModelSpec& spec, const models::OptimizerConfig& oc) {
    pipeline::PipelineOptions po;
    po.spec = schedule_of(o);
    model_ = partition::describe(spec);
    check_pipeline_flags(o, model_, po.spec);
    const int P = po.spec.stages;
    PW_INPUT_CHECK(env_.world_size == P * o.replicas,
                   "this job has " << env_.world_size << " ranks (" << env_.launcher << " environment) but --stages "
                                   << P << " x --replicas " << o.replicas << " needs " << P * o.replicas
                                   << "; a multi-process job runs one stage of one replica per rank");
    replicas_ = o.replicas;
    stage_index_ = env_.rank % P;
    replica_index_ = env_.rank / P;
    device_ = device_of_rank(o, env_, po.spec.stages);
    auto& runtime = kernels::DeviceRuntime::get(device_);
    if (device_.is_cpu())
      runtime.set_threads(o.threads > 0 ? o.threads
                                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                                          std::max(1, env_.local_world_size)));
    if (!o.device_memory.empty()) runtime.set_memory_cap(parse_bytes(o.device_memory));
    heartbeat_timeout_ = millis(o.heartbeat_timeout_seconds);
    const auto startup_deadline = Clock::now() + millis(o.startup_timeout_seconds);

    if (env_.rank == 0)
      rendezvous_ = std::make_unique<rpc::RendezvousServer>(
          env_.master, rpc::RendezvousConfig{env_.world_size, po.spec.stages, env_.job_token, heartbeat_timeout_});
    // Thrift carries the job's control messages in every case; NCCL, when chosen, the tensors.
    std::vector<std::string> addresses(static_cast<std::size_t>(env_.world_size), "127.0.0.1:0");
    addresses[static_cast<std::size_t>(env_.rank)] = rpc::HostPort{env_.advertise_host, 0}.str();
    thrift_ = std::make_unique<rpc::ThriftTransport>(env_.rank, env_.world_size, addresses, env_.job_token);
    client_ = std::make_unique<rpc::RendezvousClient>(env_.master, env_.job_token, env_.rank);
    const auto layout = client_->register_rank(thrift_->address(), startup_deadline);
    for (const auto& placement : layout.ranks) {
      if (placement.rank != env_.rank) thrift_->set_peer_address(placement.rank, placement.address);
      addresses_.push_back(placement.address);
    }
    clock_offset_ns_ = measure_clock_offset();
    heartbeat_ = std::make_unique<rpc::Heartbeat>(
        env_.master, env_.job_token, env_.rank, std::min(milliseconds(250), heartbeat_timeout_ / 4), heartbeat_timeout_,
        [this](const std::string& reason) { on_job_failure(reason); });

    guard([&] {
      choose_links(o.transport, po.spec, startup_deadline);
      // Rank 0 chooses the split (the profile method measures layers once) and tells the others,
      // with its flags (every rank must train the same way) and whether it saves the weights.
      if (env_.rank == 0) {
        client_->set("flags", shared_flags(o));
        client_->set("save", o.save_path.empty() ? "no" : "yes");
        partition_ = split_for(o, model_, po.spec, device_);
        client_->set("split", split_points_text(partition_));
      } else {
        const auto flags = client_->get("flags", startup_deadline);
        PW_INPUT_CHECK(flags == shared_flags(o), "rank " << env_.rank << " was started with other train flags than rank 0;"
                                                 " give every rank the same ones. Rank 0: " << flags << "; rank "
                                                 << env_.rank << ": " << shared_flags(o));
        saves_ = client_->get("save", startup_deadline) == "yes";
        const auto text = client_->get("split", startup_deadline);
        partition_ = partition::split_at(model_.layer_count(),
                                         text.empty() ? std::vector<int>{} : partition::parse_split_points(text));
      }
      po.devices = {device_};
      po.recompute = partition::parse_recompute(o.recompute);
      po.timeout = millis(o.stage_timeout_seconds);
      po.optimizer = oc;
      po.seed = o.seed;
      po.objective = spec.objective;
      spec_ = po.spec;
      std::vector<int> members;
      for (int s = 0; s < P; ++s) members.push_back(replica_index_ * P + s);
      pipeline_view_ = std::make_unique<rpc::SubgroupTransport>(*routes_, members, stage_index_);
      stage_ = std::make_unique<pipeline::ProcessStage>(model_, partition_, po, *pipeline_view_, *thrift_, replicas_);
      // Loaded before the broadcast, so replica 0's weights are everybody's.
      if (!o.load_path.empty()) models::load_weights(stage_->layers(), o.load_path, models::WeightCoverage::Part);
      if (replicas_ > 1) join_replicas(o, po.timeout);
      client_->barrier("built", startup_deadline);
      if (env_.rank == 0 && replicas_ > 1)
        std::fprintf(stderr, "%s", dp::Topology(P, replicas_).grid().c_str());
    });
  }

  ~ProcessBackend() override {
    if (finished_) return;
    // Failing: give the others a moment to hear why from rank 0's rendezvous before it goes.
    heartbeat_.reset();
    if (rendezvous_) rendezvous_->wait_until_all_left(std::min(milliseconds(3000), heartbeat_timeout_));
  }

  std::string describe() const override {
    std::ostringstream out;
    out << "rank " << env_.rank << " of " << env_.world_size << " (" << env_.launcher << "): stage " << stage_index_
        << " of " << spec_.stages;
    if (replicas_ > 1) out << ", replica " << replica_index_ << " of " << replicas_;
    out << " (" << pipeline::schedule_kind_name(spec_.kind) << ", " << spec_.micro_batches
        << " micro-batches, split " << split_points_text(partition_) << ") on " << device_.str() << " over "
        << link_text() << ", rendezvous " << env_.master.str();
    return out.str();
  }

  int micro_batches() const override { return spec_.micro_batches * replicas_; }
  bool is_primary() const override { return env_.rank == 0; }
  bool saves(const std::string& path) const override { return env_.rank == 0 ? !path.empty() : saves_; }

  StepOutcome step(const models::data::Batch& batch) override {
    return guard([&] {
      auto r = stage_->train_step(batch);
      return StepOutcome{r.loss, r.correct, r.samples, std::move(r.stage_busy_seconds)};
    });
  }

  models::EvalResult evaluate(models::data::DataLoader& loader, std::int64_t max_batches) override {
    return guard([&] { return stage_->evaluate(loader, max_batches); });
  }

  void save(const std::string& path, const std::string& model_name) override {
    guard([&] {
      auto tensors = stage_->gather_weights();
      if (env_.rank == 0) models::save_named_weights(tensors, path, model_name);
    });
  }

  void reset_peak_memory() override { kernels::DeviceRuntime::get(device_).allocator().reset_peak(); }
  void synchronize() override { kernels::current_stream(device_).synchronize(); }

  TraceMeta trace_meta() const override {
    TraceMeta m;
    m.model = model_.name;
    m.schedule = pipeline::schedule_kind_name(spec_.kind);
    m.stages = spec_.stages;
    m.replicas = replicas_;
    m.micro_batches = spec_.micro_batches;
    m.chunks = spec_.chunks;
    for (std::size_t i = 1; i < partition_.size(); ++i) m.split.push_back(partition_[i].begin);
    for (const auto& l : model_.layers) m.layer_names.push_back(l.name);
    m.process_rank = env_.rank;
    m.clock_offset_ns = clock_offset_ns_;
    return m;
  }
  std::string trace_path(const std::string& path) const override { return rank_trace_path(path, env_.rank); }

  void add_summary(nlohmann::json& j, const std::vector<double>& busy, double train_seconds) override {
    j["device"] = device_.str();
    j["world_size"] = env_.world_size;
    j["replicas"] = replicas_;
    if (replicas_ > 1) j["grad_compression"] = dp::compression_name(compression_);
    j["launcher"] = env_.launcher;
    j["transport"] = link_text();
    j["rank_addresses"] = addresses_;
    j["threads"] = kernels::DeviceRuntime::get(device_).threads();
    j["stages"] = spec_.stages;
    j["micro_batches"] = spec_.micro_batches;
    j["schedule"] = pipeline::schedule_kind_name(spec_.kind);
    j["chunks"] = spec_.chunks;
    std::vector<int> split;
    for (std::size_t i = 1; i < partition_.size(); ++i) split.push_back(partition_[i].begin);
    j["split"] = split;
    const auto& peaks = stage_->stage_peak_memory();
    j["stage_peak_memory_bytes"] = peaks;
    if (!peaks.empty()) j["peak_memory_bytes"] = *std::max_element(peaks.begin(), peaks.end());
    std::vector<double> fraction;
    for (double b : busy) fraction.push_back(train_seconds > 0 ? b / train_seconds : 0.0);
    j["stage_busy_fraction"] = fraction;
  }

  // A failure outside the steps (a NaN loss, a summary that cannot be written): report it once.
  void abandon(const std::string& reason) noexcept override {
    if (reported_ || !client_) return;
    if (heartbeat_ && !heartbeat_->failure().empty()) return;   // someone else's failure
    reported_ = true;
    failed_here_ = true;
    client_->report_failure(reason);
  }

  void finish() override {
    guard([&] { client_->barrier("finished", Clock::now() + std::chrono::seconds(60)); });
    heartbeat_->stop();
    client_->leave();
    finished_ = true;
    if (rendezvous_) rendezvous_->wait_until_all_left(std::chrono::seconds(10));
  }

 private:
  // Rank 0's steady clock minus ours, from the round trip with the least delay (Cristian's
  // method): trace times of every rank land on rank 0's clock.
  std::int64_t measure_clock_offset() {
    std::int64_t best_rtt = INT64_MAX, offset = 0;
    for (int i = 0; i < 5; ++i) {
      const auto before = trace::now_ns();
      const auto server = client_->server_now_ns();
      const auto after = trace::now_ns();
      if (after - before < best_rtt) {
        best_rtt = after - before;
        offset = server - (before + after) / 2;
      }
    }
    return offset;
  }

  // This stage's replicas average their gradients (Gloo on CPU, NCCL on GPU); they start from
  // replica 0's weights.
  void join_replicas(const TrainOptions& o, milliseconds timeout) {
    const std::string group = "dp/stage" + std::to_string(stage_index_) + "/";
    if (device_.is_cuda())
      collective_ = dp::make_nccl_collective(replica_index_, replicas_, device_, *client_, group + "nccl", timeout);
    else
      collective_ = std::make_shared<dp::GlooCollective>(replica_index_, replicas_, *client_, group,
                                                         env_.advertise_host, timeout);
    for (auto* layer : stage_->layers()) {
      for (auto& [name, p] : layer->named_parameters()) collective_->broadcast(p->value, 0);
      for (auto& [name, b] : layer->named_buffers()) collective_->broadcast(b->value, 0);
    }
    dp::BucketOptions buckets;
    buckets.bucket_bytes = bucket_bytes_of(o);
    buckets.compression = dp::parse_compression(o.grad_compression);
    compression_ = buckets.compression;
    auto reducer = std::make_unique<dp::BucketReducer>(stage_->executor().parameters(), collective_, buckets,
                                                       dp::TraceTrack{stage_index_, replica_index_});
    stage_->executor().set_gradient_sync(reducer.get());
    std::lock_guard lock(nccl_mutex_);
    reducer_ = std::move(reducer);
  }

  // Each link to a neighbouring stage: NCCL between two GPUs (auto), else Thrift, which also
  // carries the small control messages between any two ranks.
  void choose_links(const std::string& flag, const pipeline::ScheduleSpec& spec, rpc::Deadline deadline) {
    client_->set("device/" + std::to_string(env_.rank), device_.str());
    const int P = spec.stages;
    const int base = (env_.rank / P) * P;   // this replica's stage 0
    const int s = env_.rank % P;
    std::set<int> neighbours;
    if (s > 0) neighbours.insert(base + s - 1);
    if (s + 1 < P) neighbours.insert(base + s + 1);
    if (spec.chunks > 1) neighbours.insert({base + (s + 1) % P, base + (s + P - 1) % P});
    neighbours.erase(env_.rank);
    std::vector<rpc::Transport*> links(static_cast<std::size_t>(env_.world_size), thrift_.get());
    std::vector<int> nccl_peers;
    for (int peer : neighbours) {
      const auto device = kernels::Device::parse(client_->get("device/" + std::to_string(peer), deadline));
      const auto kind = link_transport(flag, device_, device, peer);
      link_names_.insert(transport_name(kind));
      if (kind == TransportKind::Nccl) nccl_peers.push_back(peer);
    }
    if (link_names_.empty()) link_names_.insert("thrift");
    if (!nccl_peers.empty()) {
      {
        auto nccl = rpc::make_nccl_transport(env_.rank, env_.world_size, device_, *client_, "train");
        std::lock_guard lock(nccl_mutex_);
        nccl_ = std::move(nccl);
      }
#ifdef PW_WITH_CUDA
      // Each NCCL link's first message needs both ends: open them now, in ascending peer order
      // on every rank (which cannot deadlock).
      auto& nccl = dynamic_cast<rpc::NcclTransport&>(*nccl_);
      for (int peer : nccl_peers) {
        nccl.connect(peer, deadline);
        links[static_cast<std::size_t>(peer)] = nccl_.get();
      }
#endif
    }
    links[static_cast<std::size_t>(env_.rank)] = nullptr;
    routes_ = std::make_unique<rpc::RoutingTransport>(env_.rank, std::move(links));
  }

  rpc::Transport& transport() { return *routes_; }
  std::string link_text() const {
    std::string out;
    for (const auto& name : link_names_) out += (out.empty() ? "" : "+") + name;
    return out;
  }

  // Called from the heartbeat thread: wakes this rank's waits and, should the rank be deep in a
  // long computation, ends the process after a grace period so it never outlives the job.
  void on_job_failure(const std::string& reason) {
    const std::string message = "job stopped: " + reason;
    thrift_->abort(message);
    std::lock_guard lock(nccl_mutex_);
    if (nccl_) nccl_->abort(message);
    if (reducer_) reducer_->abort(message);
    if (failed_here_) return;   // this rank's own failure: it is already on its way out
    const auto grace = std::max(milliseconds(2000), heartbeat_timeout_);
    std::thread([message, grace, rank = env_.rank] {
      std::this_thread::sleep_for(grace);
      std::fprintf(stderr, "pipewright: rank %d: %s (still busy %.1f s later; exiting)\n", rank, message.c_str(),
                   std::chrono::duration<double>(grace).count());
      std::fflush(stderr);
      _exit(5);
    }).detach();
  }

  // Runs `body`; on this rank's own failure tells the rendezvous why (so every rank stops with
  // the cause). An error that is the echo of another rank's loss (a refused send to a dead peer)
  // becomes an AbortedError naming that rank, once the heartbeat has heard of it.
  template <typename Body>
  auto guard(Body body) -> decltype(body()) {
    try {
      return body();
    } catch (const rpc::AbortedError&) {
      throw;
    } catch (const std::exception& e) {
      // A broken link to a peer is most likely that peer's death: give the heartbeat time to hear.
      const bool peer_lost = dynamic_cast<const rpc::PeerLostError*>(&e) != nullptr;
      const auto until = Clock::now() + (peer_lost ? heartbeat_timeout_ + milliseconds(500)
                                                   : std::min(milliseconds(1500), heartbeat_timeout_));
      while (heartbeat_ && heartbeat_->failure().empty() && Clock::now() < until)
        std::this_thread::sleep_for(milliseconds(50));
      if (heartbeat_ && !heartbeat_->failure().empty())
        throw rpc::AbortedError(std::string(e.what()) + " (job stopped: " + heartbeat_->failure() + ")");
      failed_here_ = true;
      reported_ = true;
      client_->report_failure(e.what());
      thrift_->abort("job stopped: this rank failed");
      throw;
    }
  }

  rpc::LaunchEnv env_;
  kernels::Device device_;
  std::set<std::string> link_names_;   // the transports of this rank's links to its neighbours
  milliseconds heartbeat_timeout_{5000};
  pipeline::ScheduleSpec spec_;
  partition::ModelDescription model_;
  partition::Partition partition_;
  std::vector<std::string> addresses_;
  bool finished_ = false;
  bool reported_ = false;                   // this rank told the rendezvous why it stops
  std::atomic<bool> failed_here_{false};    // the job failed because of this rank
  std::int64_t clock_offset_ns_ = 0;
  int replicas_ = 1;
  int stage_index_ = 0;
  int replica_index_ = 0;
  dp::Compression compression_ = dp::Compression::None;
  bool saves_ = false;   // on ranks other than 0: whether rank 0 saves (every rank then sends its weights)
  // Destroyed bottom-up: the stage first, the rendezvous service last.
  std::unique_ptr<rpc::RendezvousServer> rendezvous_;
  std::unique_ptr<rpc::ThriftTransport> thrift_;
  std::unique_ptr<rpc::RendezvousClient> client_;
  std::mutex nccl_mutex_;   // the heartbeat thread aborts nccl_ while it may still be made
  std::unique_ptr<rpc::Transport> nccl_;
  std::unique_ptr<rpc::RoutingTransport> routes_;
  std::unique_ptr<rpc::SubgroupTransport> pipeline_view_;   // this replica's stages as ranks 0..P-1
  std::unique_ptr<pipeline::ProcessStage> stage_;
  std::shared_ptr<dp::Collective> collective_;
  std::unique_ptr<dp::BucketReducer> reducer_;
  std::unique_ptr<rpc::Heartbeat> heartbeat_;   // first to go: its callback uses the transports
};

}  // namespace

std::unique_ptr<TrainBackend> make_process_backend(const TrainOptions& o, const models::ModelSpec& spec,
                                                   const models::OptimizerConfig& optimizer, const rpc::LaunchEnv& env) {
  return std::make_unique<ProcessBackend>(o, spec, optimizer, env);
}

}  // namespace pw::tools
