#pragma once
// Who the ranks of a job are and how they reach each other. A world of threads runs every rank
// of the job in this process (in-process links, or Thrift over loopback); a world of processes
// runs one rank here, started by `pipewright launch`, torchrun-style variables, Slurm or Open MPI
// (a rendezvous on rank 0, Thrift links, NCCL between GPUs, heartbeats and failure reports).
// Rank = replica * stages + stage. An Engine is built the same way in both.
//
// The world owns the transports, the store, the heartbeat and the collectives' meeting place, and
// one CancelToken that reaches every blocking wait. Shutdown order: the rank bodies end (engines
// and their reducers go), then the heartbeat stops, the rank leaves the rendezvous, the links
// close, and rank 0's rendezvous goes last.
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dataparallel/collective.h"
#include "kernels/device.h"
#include "rpc/launch_env.h"
#include "rpc/store.h"
#include "rpc/tls.h"
#include "rpc/transport.h"
#include "train/cancel_token.h"

namespace pw::train {

enum class WorldKind { Threads, Processes };
// How the ranks of a world of threads talk: through memory, or Thrift on loopback (as separate
// processes would; for tests and `--transport thrift`).
enum class ThreadLinks { InProcess, Thrift };

struct WorldShape {
  int stages = 1;
  int replicas = 1;
  int world_size() const { return stages * replicas; }
};

struct WorldTimeouts {
  std::chrono::milliseconds heartbeat{5000};
  std::chrono::milliseconds startup{120000};
};

// One rank's view of its world.
class RankLinks {
 public:
  virtual ~RankLinks() = default;
  int rank() const { return rank_; }
  int world_size() const { return shape_.world_size(); }
  int stage() const { return rank_ % shape_.stages; }
  int replica() const { return rank_ / shape_.stages; }
  const WorldShape& shape() const { return shape_; }
  // "rank 3 (stage 1, replica 1)"
  std::string name() const;
  virtual WorldKind world_kind() const = 0;
  // The rank that speaks for this process: its only rank, or rank 0 of a world of threads.
  bool first_in_process() const { return world_kind() == WorldKind::Processes || rank_ == 0; }
  virtual int local_rank() const = 0;        // among the ranks on this host
  virtual int ranks_on_host() const = 0;     // they share its CPU threads
  virtual std::string launcher() const = 0;  // "threads", "torchrun-style", "Slurm", "Open MPI", ...
  // The launcher's restarts of the job before this attempt (count, causes): from the launch
  // environment, read once when the world was made.
  virtual const rpc::RestartEnv& restarts() const = 0;

  // Opens the links to this rank's pipeline neighbours once its device is known (NCCL between
  // two GPUs when `transport` allows). Every rank calls it, before transport().
  virtual void connect(kernels::Device device, const std::set<int>& neighbours, TransportKind transport,
                       rpc::Deadline deadline) = 0;
  // To every rank of the job: activations, gradients and the job's control messages.
  virtual rpc::Transport& transport() = 0;
  virtual rpc::Store& store() = 0;
  virtual CancelToken& cancel_token() = 0;
  // A group of `members` (world ranks; this rank among them) for collectives: NCCL for GPUs
  // (distinct physical ones); for CPU devices, and GPUs staged through the host, Gloo or the job's
  // links as `cpu` says (auto: dp::resolve_cpu_collectives on the members' addresses). Every
  // member calls it at the same time with the same `key`; after connect() when it may use links.
  std::shared_ptr<dp::Collective> make_collective(const std::vector<int>& members, kernels::Device device,
                                                  const std::string& key, std::chrono::milliseconds timeout,
                                                  dp::CpuCollectives cpu = dp::CpuCollectives::Auto);
  // What this rank's last make_collective chose, for the summary: "gloo", "links", "nccl", or
  // "gloo" / "links" staged through the host for GPUs ("links via host"); empty before any.
  const std::string& collectives_text() const { return collectives_; }
  // Every rank of the job reaches `name` before any goes on.
  void barrier(const std::string& name, rpc::Deadline deadline);
  // store().get() that also ends (AbortedError) as soon as the job is cancelled.
  std::string get(const std::string& key, rpc::Deadline deadline);

  // What the summary and the log say about the links.
  virtual std::string link_text() const = 0;                 // "inprocess", "thrift", "nccl+thrift"
  virtual std::vector<std::string> addresses() const { return {}; }
  virtual std::int64_t clock_offset_ns() const { return 0; }  // rank 0's trace clock minus this rank's
  // The address this rank's servers listen on (its collectives, the metrics endpoint).
  virtual std::string bind_host() const { return "127.0.0.1"; }
  // The secret every link of the job proves itself with (empty in a world of threads).
  virtual std::string job_token() const { return {}; }

 protected:
  RankLinks(int rank, WorldShape shape) : rank_(rank), shape_(shape) {}
  virtual void store_barrier(const std::string& name, rpc::Deadline deadline);

 private:
  int rank_;
  WorldShape shape_;
  std::string collectives_;
};

class World {
 public:
  virtual ~World() = default;
  virtual WorldKind kind() const = 0;
  const WorldShape& shape() const { return shape_; }
  virtual int local_ranks() const = 0;   // ranks this process runs
  virtual RankLinks& local(int index) = 0;
  virtual std::string launcher() const = 0;   // "threads", "torchrun-style", "Slurm", ...
  // Runs body(links) once per local rank, each on its own thread (a rank keeps its thread from
  // one run to the next: per-thread state such as oneDNN's thread team is made once). When one rank fails, the job
  // stops on every rank (the world's token is cancelled, other processes are told) and the root
  // cause is rethrown here, not another rank's echo of it.
  virtual void run(const std::function<void(RankLinks&)>& body) = 0;
  // After a failed run: clears the cancellation and undelivered messages so that the next run
  // starts clean. Only a world of threads can (it returns false otherwise); collectives that
  // were cancelled stay unusable.
  virtual bool recover() { return false; }
  // Every rank is done with the job: a world of processes meets at a last barrier, stops its
  // heartbeat and leaves the rendezvous (rank 0 waits for all to leave before its service goes).
  // Call it once, after the last run.
  virtual void finish() {}

 protected:
  explicit World(WorldShape shape) : shape_(shape) {}
  WorldShape shape_;
};

// `restarts`: none, unless a launcher restarted this process as a world of one rank.
// `tls`: mutual TLS on every Thrift link (rpc/tls.h); in-process links have no sockets to protect.
std::unique_ptr<World> make_thread_world(WorldShape shape, ThreadLinks links = ThreadLinks::InProcess,
                                         rpc::RestartEnv restarts = {}, rpc::Tls tls = {});
// Throws InputError when the environment's world size is not shape.world_size().
std::unique_ptr<World> make_process_world(WorldShape shape, const rpc::LaunchEnv& env, WorldTimeouts timeouts,
                                          rpc::Tls tls = {});

}  // namespace pw::train
