#pragma once
// An EmbeddingBag whose table lives on the parameter servers (the worker side of issue 6).
//
// forward:  the batch's ids are de-duplicated (unique_bag_ids) and their rows looked up: from the
//           step's prefetch when one was started (prefetch), else pulled from their
//           shards in parallel (PsClient); then pooled.
// backward: per-unique-row gradients (bag_pool_backward) are added into this step's pending
//           gradients; nothing goes to the servers yet, so every micro-batch of a step sees the
//           same rows, as a local table would.
// push_gradients (once per optimizer step): the step's gradients, scaled (1/replicas, so
//           the replicas' pushes add up to the mean gradient), leave for the servers in key order
//           on a background thread; the step goes on without waiting for the answer. The next
//           push waits for this one (each worker's steps reach the servers in order), and so do
//           evaluation and flush.
// prefetch (the engine gives the next step's inputs while the current step runs): the
//           next step's rows are pulled on a background thread, so with async or bounded updates
//           a worker's embedding traffic overlaps its compute and the dense all-reduce is the
//           only per-step barrier.
//
// Pulls of step t wait on the servers for: step t - 1 applied (sync), step t - s (bounded
// staleness s), nothing (async); a prefetched pull waits the same, on its own connections. The
// layer holds no parameters of its own; the servers apply the sparse optimizer. Connections are
// opened on first use, so building the layer (e.g. to count a model's parameters) contacts nobody.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dataparallel/ps/background_call.h"
#include "dataparallel/ps/shard.h"
#include "dataparallel/ps/table.h"
#include "dataparallel/ps/remote_rows.h"
#include "models/layer.h"
#include "models/layers/embedding_bag.h"
#include "rpc/host_port.h"
#include "rpc/tls.h"

namespace pw::dp {

class PsClient;

// What a job's server-backed tables moved, added up over all of them (shared by the layers).
struct PsTraffic {
  std::atomic<std::int64_t> pulled_rows{0};   // rows fetched from the servers
  std::atomic<std::int64_t> pushed_rows{0};
  std::atomic<std::int64_t> pushes{0};        // (table, step) pushes
  std::atomic<std::int64_t> pull_ns{0}, push_ns{0};   // time the calls took (in the background or not)
  std::atomic<std::int64_t> prefetched_rows{0};       // of pulled_rows, fetched ahead of their step
  // Time the training thread stood still for the servers: a forward whose rows were not there
  // yet (a pull without prefetch, or a prefetch still under way) and a push that found the
  // previous one still unanswered (not counted: waits of flush and evaluation).
  // `lookup_waits`/`push_waits` count those that waited at all.
  std::atomic<std::int64_t> lookup_wait_ns{0}, push_wait_ns{0};
  std::atomic<std::int64_t> lookup_waits{0}, push_waits{0};
};

struct PsBagOptions {
  std::vector<rpc::HostPort> servers;   // shard i at servers[i]
  std::string job_token;
  TableConfig table;                    // created on every shard on first use (same definition: no-op)
  int bag_size = 1;
  models::BagMode mode = models::BagMode::Sum;
  UpdateMode update = UpdateMode::Sync;
  int staleness = 1;                    // bounded: >= 1
  double gradient_scale = 1.0;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  std::shared_ptr<PsTraffic> traffic;   // empty: the layer keeps its own
  rpc::Tls tls;                         // set: mutual TLS to the servers (rpc/tls.h)
};

// What a pull of step t asks the server to wait for (PsShard::pull's staleness; -1: nothing).
int server_staleness(UpdateMode update, int staleness);

class PsEmbeddingBag : public models::Layer, public RemoteRows {
 public:
  explicit PsEmbeddingBag(PsBagOptions options);
  ~PsEmbeddingBag() override;
  std::string type_name() const override { return "PsEmbeddingBag"; }
  const PsBagOptions& options() const { return o_; }

  const PsTraffic& traffic() const { return *o_.traffic; }
  std::int64_t next_step() const { return step_; }

  void set_worker(int worker) override { worker_ = worker; }
  double gradient_sum_of_squares() const override;
  void scale_gradients(double factor) override;
  PendingRows pending_rows() const override;
  void push_gradients(int worker, RemoteGradients what) override;
  void prefetch(const std::vector<kernels::Tensor>& next_micro_batches) override;
  void flush() override;
  void reconnect() override;
  void abort(const std::string& why) noexcept override;

 protected:
  Output forward_impl(const kernels::Tensor& ids, models::Mode mode) override;
  kernels::Tensor backward_input_impl(models::Context& ctx, const kernels::Tensor& grad_y) override;
  void backward_weight_impl(models::Context& ctx, const kernels::Tensor& grad_y) override;
  kernels::Shape output_shape_impl(const kernels::Shape& input) const override;

 private:
  // Connects, creates the table, continues after the servers' last applied step. A step this
  // worker pushed before a job stopped mid-step is pushed again by the resumed job; the server
  // acknowledges the repeat without applying it (the first push stands).
  void start();
  std::vector<float> rows_of(const std::vector<std::int64_t>& keys, models::Mode mode);
  // The rows of `keys` this step holds (its prefetch, waited for if still under way, and the rows
  // pulled earlier in the step) written to out; the positions of those it does not hold.
  std::vector<std::size_t> held_rows(const std::vector<std::int64_t>& keys, float* out);
  void keep_step_rows(const std::vector<std::int64_t>& keys, const std::vector<float>& rows);
  void wait_for_push(const char* why);   // the push in flight answered (rethrows its error)
  void abandon_background_calls();
  std::chrono::steady_clock::time_point background_deadline() const;

  // The rows of one step, fetched in the background (and those pulled during the step, kept
  // beside them until it ends).
  struct Prefetch {
    std::int64_t step = -1;
    std::vector<std::int64_t> keys;               // every unique key of the step's micro-batches
    std::unordered_map<std::int64_t, std::size_t> index;   // key -> position in keys
    std::vector<float> rows;                      // keys.size() * dim once complete
    BackgroundCall<std::vector<float>> call;
    bool complete = false;
  };

  PsBagOptions o_;
  std::shared_ptr<PsClient> client_;            // forward pulls without prefetch, evaluation
  // Background pulls, one client per step parity: the prefetch of step t + 1 waits on the servers
  // for step t's pushes (sync, bounded), and must not hold the connections that step t's own
  // prefetch, still under way, needs.
  std::array<std::shared_ptr<PsClient>, 2> prefetch_clients_;
  std::shared_ptr<PsClient> push_client_;       // background pushes
  // The clients above are made and dropped on the training thread; abort() comes from another.
  std::mutex clients_mutex_;
  std::optional<std::string> aborted_;          // why, once abort() was called
  std::int64_t step_ = -1;   // the step being trained; -1 until started
  int worker_ = 0;           // this copy's worker (replica) on the servers
  std::map<std::int64_t, std::vector<float>> pending_;   // this step's gradients, by key
  std::map<std::int64_t, Prefetch> prefetches_;   // by step: this one's and the next one's
  BackgroundCall<int> push_;                    // the last push, until answered
  std::vector<std::thread> parked_;             // abandoned calls' threads, joined at destruction
};

}  // namespace pw::dp
