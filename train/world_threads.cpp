// A world of threads: every rank of the job in this process, one thread each.
#include <exception>
#include <future>
#include <thread>

#include "core/error.h"
#include "dataparallel/run_per_rank.h"
#include "pipeline/stage_worker.h"
#include "rpc/in_process_transport.h"
#include "rpc/job_token.h"
#include "rpc/thrift_transport.h"
#include "train/job_config.h"
#include "train/world.h"

namespace pw::train {
namespace {

class ThreadRank : public RankLinks {
 public:
  ThreadRank(int rank, WorldShape shape, rpc::Transport& transport, rpc::Store& store, CancelToken& token,
             const char* links, const rpc::RestartEnv& restarts)
      : RankLinks(rank, shape), transport_(transport), store_(store), token_(token), links_(links),
        restarts_(restarts) {}

  void connect(kernels::Device, const std::set<int>&, TransportKind transport, rpc::Deadline) override {
    if (transport == TransportKind::Nccl)
      throw ConfigError("/transport", std::string(enum_name(transport)) + ": the stages of this job share one process, "
                                      "where auto, inprocess or thrift work; NCCL links need one process per GPU "
                                      "(a launcher's ranks)");
  }
  WorldKind world_kind() const override { return WorldKind::Threads; }
  int local_rank() const override { return rank(); }
  int ranks_on_host() const override { return world_size(); }
  std::string launcher() const override { return "threads"; }
  const rpc::RestartEnv& restarts() const override { return restarts_; }
  rpc::Transport& transport() override { return transport_; }
  rpc::Store& store() override { return store_; }
  CancelToken& cancel_token() override { return token_; }
  std::string link_text() const override { return links_; }

 private:
  rpc::Transport& transport_;
  rpc::Store& store_;
  CancelToken& token_;
  const char* links_;
  const rpc::RestartEnv& restarts_;
};

class ThreadWorld : public World {
 public:
  ThreadWorld(WorldShape shape, ThreadLinks links, rpc::RestartEnv restarts, rpc::Tls tls)
      : World(shape), restarts_(std::move(restarts)), hub_(shape.world_size()) {
    const int n = shape.world_size();
    if (links == ThreadLinks::Thrift) {
      const std::string token = rpc::make_job_token();
      const std::vector<std::string> loopback(static_cast<std::size_t>(n), "127.0.0.1:0");
      std::vector<rpc::ThriftTransport*> thrift;
      for (int r = 0; r < n; ++r) {
        auto t = std::make_unique<rpc::ThriftTransport>(r, n, loopback, token, rpc::ThriftTransportLimits{}, tls);
        thrift.push_back(t.get());
        transports_.push_back(std::move(t));
      }
      for (auto* t : thrift)
        for (int peer = 0; peer < n; ++peer) t->set_peer_address(peer, thrift[static_cast<std::size_t>(peer)]->address());
      for (auto& t : transports_) subscriptions_.emplace_back(token_, [&t](const std::string& why) { t->abort(why); });
    } else {
      for (int r = 0; r < n; ++r) transports_.push_back(hub_.endpoint(r));
      subscriptions_.emplace_back(token_, [this](const std::string& why) { hub_.abort(why); });
    }
    for (int r = 0; r < n; ++r) {
      ranks_.push_back(std::make_unique<ThreadRank>(r, shape, *transports_[static_cast<std::size_t>(r)], store_,
                                                    token_, links == ThreadLinks::Thrift ? "thrift" : "inprocess",
                                                    restarts_));
      workers_.push_back(std::make_unique<pipeline::StageWorker>());
    }
    links_ = links;
  }

  ~ThreadWorld() override {
    token_.cancel("the job is shutting down");
    workers_.clear();   // joins the rank threads before what they use goes
  }

  bool recover() override {
    token_.reset();
    if (links_ == ThreadLinks::InProcess) hub_.reset();
    else
      for (auto& t : transports_) static_cast<rpc::ThriftTransport&>(*t).reset();
    return true;
  }

  WorldKind kind() const override { return WorldKind::Threads; }
  int local_ranks() const override { return shape_.world_size(); }
  RankLinks& local(int index) override { return *ranks_.at(static_cast<std::size_t>(index)); }
  std::string launcher() const override { return "threads"; }

  void run(const std::function<void(RankLinks&)>& body) override {
    const int n = shape_.world_size();
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
    std::vector<std::future<void>> done;
    for (int r = 0; r < n; ++r)
      done.push_back(workers_[static_cast<std::size_t>(r)]->submit([&, r] {
        auto& links = *ranks_[static_cast<std::size_t>(r)];
        try {
          body(links);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          token_.cancel("stopped because " + links.name() + " failed: " + e.what());
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          token_.cancel("stopped because " + links.name() + " failed");
        }
      }));
    for (auto& d : done) d.get();
    dp::rethrow_root_cause(errors);
  }

 private:
  rpc::RestartEnv restarts_;
  CancelToken token_;
  rpc::InProcessHub hub_;
  rpc::InMemoryStore store_;
  std::vector<std::unique_ptr<rpc::Transport>> transports_;
  std::vector<CancelSubscription> subscriptions_;
  std::vector<std::unique_ptr<ThreadRank>> ranks_;
  ThreadLinks links_ = ThreadLinks::InProcess;
  std::vector<std::unique_ptr<pipeline::StageWorker>> workers_;   // one thread per rank, for every run
};

}  // namespace

std::unique_ptr<World> make_thread_world(WorldShape shape, ThreadLinks links, rpc::RestartEnv restarts, rpc::Tls tls) {
  PW_INPUT_CHECK(shape.stages >= 1 && shape.replicas >= 1,
                 "a world needs at least one stage and one replica, got " << shape.stages << " x " << shape.replicas);
  return std::make_unique<ThreadWorld>(shape, links, std::move(restarts), std::move(tls));
}

}  // namespace pw::train
