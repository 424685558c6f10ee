// A world of processes: this process is one rank. Rank 0 also runs the rendezvous; a heartbeat
// ends the job on every rank as soon as one rank fails, dies or stops answering.
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "kernels/allocator.h"
#include "kernels/cuda_probe.h"
#include "rpc/frame_check.h"
#include "rpc/nccl_transport.h"
#include "rpc/rendezvous_client.h"
#include "rpc/rendezvous_server.h"
#include "rpc/routing_transport.h"
#include "rpc/thrift_transport.h"
#include "rpc/tls.h"
#include "train/job_config.h"
#include "train/world.h"

namespace pw::train {
namespace {

using std::chrono::milliseconds;

enum class LinkKind { Thrift, Nccl };

ConfigError not_across_processes(TransportKind transport) {
  return ConfigError("/transport", std::string(enum_name(transport)) + " is not available in a multi-process job "
                                   "(ranks are separate processes); use auto, thrift or nccl");
}

// The transport of the link between this rank (on `self`) and a peer (on `peer`): NCCL when both
// ends are distinct physical GPUs (auto), Thrift otherwise; the config's /transport forces one for every link.
// `same_gpu`: both ends are the same physical GPU (by UUID, whatever CUDA_VISIBLE_DEVICES says).
LinkKind link_kind(TransportKind flag, kernels::Device self, kernels::Device peer, int peer_rank,
                   bool same_gpu) {
  if (flag == TransportKind::Thrift) return LinkKind::Thrift;
  if (flag == TransportKind::Nccl) {
    if (!self.is_cuda() || !peer.is_cuda())
      throw ConfigError("/transport", "nccl moves tensors between GPUs, but the link to rank " +
                                          std::to_string(peer_rank) + " joins " + self.str() + " and " + peer.str() +
                                          "; use auto (Thrift for links with a CPU end) or thrift");
    if (same_gpu)
      throw ConfigError("/transport", "nccl: rank " + std::to_string(peer_rank) +
                                          " uses the same physical GPU as this rank (" + self.str() +
                                          "), which NCCL refuses; give each rank its own GPU or use auto or thrift");
    return LinkKind::Nccl;
  }
  if (flag != TransportKind::Auto) throw not_across_processes(flag);
  // NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU"): Thrift then.
  return self.is_cuda() && peer.is_cuda() && !same_gpu ? LinkKind::Nccl : LinkKind::Thrift;
}

class ProcessRank : public RankLinks {
 public:
  ProcessRank(const rpc::LaunchEnv& env, WorldShape shape, WorldTimeouts timeouts, CancelToken& token, rpc::Tls tls)
      : RankLinks(env.rank, shape), env_(env), timeouts_(timeouts), token_(token), tls_(std::move(tls)) {
    try {
      start();
    } catch (const std::exception& e) {
      // The destructor will not run: tell the others why, and keep rank 0's rendezvous up long
      // enough for them to hear it.
      heartbeat_.reset();
      subscription_.reset();
      if (client_) client_->report_failure(e.what());
      if (rendezvous_) rendezvous_->wait_until_all_left(std::min(milliseconds(3000), timeouts_.heartbeat));
      throw;
    }
  }

  void start() {
    const auto& env = env_;
    const auto startup_deadline = Clock::now() + timeouts_.startup;
    // Without TLS every call carries the job token in clear: a rank whose rendezvous is on another
    // host refuses before it sends the token anywhere (job_session.cpp checks the ranks' hosts once
    // they are known).
    if (!tls_ && !env.plain_links && !rpc::is_this_host(env.master.host))
      throw ConfigError("/tls", "the rendezvous at " + env.master.str() + " is on another host and the job's links "
                                "have no TLS, so every call would carry the job token in clear; give /tls/cert, "
                                "/tls/key and /tls/ca (docs/running_safely.md), or /tls/plain_links to run over plain "
                                "TCP on a network you trust");
    if (env.rank == 0)
      rendezvous_ = std::make_unique<rpc::RendezvousServer>(
          env.master, rpc::RendezvousConfig{env.world_size, shape().stages, env.job_token, timeouts_.heartbeat, tls_});
    // Thrift carries the job's control messages in every case; NCCL, when chosen, the tensors.
    std::vector<std::string> addresses(static_cast<std::size_t>(env.world_size), "127.0.0.1:0");
    addresses[static_cast<std::size_t>(env.rank)] = rpc::HostPort{env.advertise_host, 0}.str();
    thrift_ = std::make_unique<rpc::ThriftTransport>(env.rank, env.world_size, addresses, env.job_token,
                                                     rpc::ThriftTransportLimits{}, tls_);
    client_ = std::make_unique<rpc::RendezvousClient>(env.master, env.job_token, env.rank, tls_);
    const auto layout = client_->register_rank(thrift_->address(), startup_deadline);
    for (const auto& placement : layout.ranks) {
      if (placement.rank != env.rank) thrift_->set_peer_address(placement.rank, placement.address);
      addresses_.push_back(placement.address);
    }
    clock_offset_ns_ = measure_clock_offset();
    subscription_ = CancelSubscription(token_, [this](const std::string& why) { abort_links(why); });
    heartbeat_ = std::make_unique<rpc::Heartbeat>(
        env.master, env.job_token, env.rank, std::min(milliseconds(250), timeouts_.heartbeat / 4), timeouts_.heartbeat,
        [this](const std::string& reason) { on_job_failure(reason); }, tls_);
  }

  ~ProcessRank() override {
    heartbeat_.reset();
    subscription_.reset();
    // Failing: give the others a moment to hear why from rank 0's rendezvous before it goes.
    if (rendezvous_ && !finished_) rendezvous_->wait_until_all_left(std::min(milliseconds(3000), timeouts_.heartbeat));
  }

  void connect(kernels::Device device, const std::set<int>& neighbours, TransportKind flag,
               rpc::Deadline deadline) override {
    client_->set("device/" + std::to_string(rank()), device.str());
    client_->set("gpu/" + std::to_string(rank()),
                 device.is_cuda() ? kernels::cuda_device_uuid(device.index) : "");
    std::vector<rpc::Transport*> links(static_cast<std::size_t>(world_size()), thrift_.get());
    std::vector<int> nccl_peers;
    for (int peer : neighbours) {
      if (peer == rank()) continue;
      const auto peer_device = kernels::Device::parse(get("device/" + std::to_string(peer), deadline));
      const std::string peer_gpu = get("gpu/" + std::to_string(peer), deadline);
      const bool same_gpu = device.is_cuda() && peer_gpu == kernels::cuda_device_uuid(device.index);
      const auto kind = link_kind(flag, device, peer_device, peer, same_gpu);
      link_names_.insert(kind == LinkKind::Nccl ? "nccl" : "thrift");
      if (kind == LinkKind::Nccl) nccl_peers.push_back(peer);
    }
    if (link_names_.empty()) {
      if (flag == TransportKind::InProcess) throw not_across_processes(flag);
      link_names_.insert("thrift");
    }
    if (!nccl_peers.empty()) {
      auto nccl = rpc::make_nccl_transport(rank(), world_size(), device, *client_, "train");
      {
        std::lock_guard lock(nccl_mutex_);
        nccl_ = std::move(nccl);
      }
#ifdef PW_WITH_CUDA
      // Each NCCL link's first message needs both ends: open them now, in ascending peer order on
      // every rank (which cannot deadlock).
      auto& n = dynamic_cast<rpc::NcclTransport&>(*nccl_);
      for (int peer : nccl_peers) {
        n.connect(peer, deadline);
        links[static_cast<std::size_t>(peer)] = nccl_.get();
      }
#endif
    }
    links[static_cast<std::size_t>(rank())] = nullptr;
    routes_ = std::make_unique<rpc::RoutingTransport>(rank(), std::move(links));
  }

  WorldKind world_kind() const override { return WorldKind::Processes; }
  int local_rank() const override { return env_.local_rank; }
  int ranks_on_host() const override { return std::max(1, env_.local_world_size); }
  std::string launcher() const override { return env_.launcher; }
  const rpc::RestartEnv& restarts() const override { return env_.restarts; }
  rpc::Transport& transport() override {
    PW_CHECK(routes_ != nullptr, name() << ": transport() before connect()");
    return *routes_;
  }
  rpc::Store& store() override { return *client_; }
  CancelToken& cancel_token() override { return token_; }
  std::string link_text() const override {
    std::string out;
    for (const auto& n : link_names_) out += (out.empty() ? "" : "+") + n;
    return out.empty() ? "thrift" : out;
  }
  std::vector<std::string> addresses() const override { return addresses_; }
  std::int64_t clock_offset_ns() const override { return clock_offset_ns_; }

  // Runs the rank's body; on this rank's own failure tells the rendezvous why (so every rank stops
  // with the cause).
  // - An error that cannot be the echo of another rank's failure (bad input other than a refused
  //   frame or TLS handshake, out of memory, a job that did not train) is reported at once, unless
  //   the heartbeat already heard of another rank's failure (then it is the echo of that one).
  // - Any other error (a refused send to a dead peer, a timeout) may be such an echo: it becomes an
  //   AbortedError naming that rank once the heartbeat has heard of it (waiting a little for it).
  // - An AbortedError (this rank stops because another one failed) waits, at most the heartbeat
  //   timeout, until the heartbeat has heard why: a rank that ended first would otherwise be taken
  //   for the cause by the others ("rank 1 was lost") before the real one was reported.
  void guarded(const std::function<void(RankLinks&)>& body) {
    try {
      body(*this);
    } catch (const rpc::AbortedError&) {
      wait_for_job_failure(timeouts_.heartbeat + milliseconds(500));
      throw;
    } catch (const std::exception& e) {
      if (!cannot_be_an_echo(e) || !heartbeat_->failure().empty()) {
        const bool peer_lost = dynamic_cast<const rpc::PeerLostError*>(&e) != nullptr;
        wait_for_job_failure(peer_lost ? timeouts_.heartbeat + milliseconds(500)
                                       : std::min(milliseconds(1500), timeouts_.heartbeat));
        if (!heartbeat_->failure().empty())
          throw rpc::AbortedError(std::string(e.what()) + " (job stopped: " + heartbeat_->failure() + ")");
      }
      failed_here_ = true;
      client_->report_failure(e.what());
      thrift_->abort("job stopped: this rank failed");
      throw;
    }
  }

  void finish() {
    guarded([](RankLinks& links) { links.barrier("finished", Clock::now() + std::chrono::seconds(60)); });
    heartbeat_->stop();
    client_->leave();
    finished_ = true;
    if (rendezvous_) rendezvous_->wait_until_all_left(std::chrono::seconds(10));
  }

 protected:
  std::string bind_host() const override { return env_.advertise_host; }
  std::string job_token() const override { return env_.job_token; }

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

  // Errors of this rank's own making: never a consequence of another rank's failure.
  static bool cannot_be_an_echo(const std::exception& e) {
    // A refused frame or handshake may come from a peer dying half-way through.
    if (dynamic_cast<const rpc::BadFrameError*>(&e) != nullptr || dynamic_cast<const rpc::TlsError*>(&e) != nullptr)
      return false;
    return dynamic_cast<const InputError*>(&e) != nullptr || dynamic_cast<const kernels::OutOfMemory*>(&e) != nullptr ||
           dynamic_cast<const TrainingFailed*>(&e) != nullptr;
  }

  void wait_for_job_failure(milliseconds at_most) {
    const auto until = Clock::now() + at_most;
    while (heartbeat_->failure().empty() && Clock::now() < until) std::this_thread::sleep_for(milliseconds(50));
  }

  void abort_links(const std::string& why) {
    thrift_->abort(why);
    std::lock_guard lock(nccl_mutex_);
    if (nccl_) nccl_->abort(why);
  }

  // From the heartbeat thread: cancels every wait of this rank and, should the rank be deep in a
  // long computation, ends the process after a grace period so it never outlives the job.
  void on_job_failure(const std::string& reason) {
    const std::string message = "job stopped: " + reason;
    token_.cancel(message);
    if (failed_here_) return;   // this rank's own failure: it is already on its way out
    const auto grace = std::max(milliseconds(2000), timeouts_.heartbeat);
    std::thread([message, grace, rank = rank()] {
      std::this_thread::sleep_for(grace);
      log::outputf("pipewright: rank %d: %s (still busy %.1f s later; exiting)", rank, message.c_str(),
                   std::chrono::duration<double>(grace).count());
      std::fflush(stderr);
      _exit(5);
    }).detach();
  }

  rpc::LaunchEnv env_;
  WorldTimeouts timeouts_;
  CancelToken& token_;
  rpc::Tls tls_;   // before the links that use it
  std::vector<std::string> addresses_;
  std::set<std::string> link_names_;
  std::int64_t clock_offset_ns_ = 0;
  bool finished_ = false;
  std::atomic<bool> failed_here_{false};
  // Destroyed bottom-up: the heartbeat first, the rendezvous service last.
  std::unique_ptr<rpc::RendezvousServer> rendezvous_;
  std::unique_ptr<rpc::ThriftTransport> thrift_;
  std::unique_ptr<rpc::RendezvousClient> client_;
  std::mutex nccl_mutex_;   // the heartbeat thread aborts nccl_ while it may still be made
  std::unique_ptr<rpc::Transport> nccl_;
  std::unique_ptr<rpc::RoutingTransport> routes_;
  CancelSubscription subscription_;
  std::unique_ptr<rpc::Heartbeat> heartbeat_;
};

class ProcessWorld : public World {
 public:
  ProcessWorld(WorldShape shape, const rpc::LaunchEnv& env, WorldTimeouts timeouts, rpc::Tls tls)
      : World(shape), launcher_(env.launcher) {
    PW_INPUT_CHECK(env.world_size == shape.world_size(),
                   "this job has " << env.world_size << " ranks (" << env.launcher << " environment) but /pipeline/stages "
                                   << shape.stages << " x /replicas/replicas " << shape.replicas << " needs "
                                   << shape.world_size() << "; a multi-process job runs one stage of one replica per rank");
    rank_ = std::make_unique<ProcessRank>(env, shape, timeouts, token_, std::move(tls));
  }
  WorldKind kind() const override { return WorldKind::Processes; }
  int local_ranks() const override { return 1; }
  RankLinks& local(int index) override {
    PW_CHECK(index == 0, "a world of processes runs one rank here, asked for local rank " << index);
    return *rank_;
  }
  std::string launcher() const override { return launcher_; }
  void run(const std::function<void(RankLinks&)>& body) override { rank_->guarded(body); }
  void finish() override { rank_->finish(); }

 private:
  std::string launcher_;
  CancelToken token_;
  std::unique_ptr<ProcessRank> rank_;
};

}  // namespace

std::unique_ptr<World> make_process_world(WorldShape shape, const rpc::LaunchEnv& env, WorldTimeouts timeouts,
                                          rpc::Tls tls) {
  return std::make_unique<ProcessWorld>(shape, env, timeouts, std::move(tls));
}

}  // namespace pw::train
