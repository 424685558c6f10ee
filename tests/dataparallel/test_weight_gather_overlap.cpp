// Sharded optimizer state: the weights updated by their owners are all-gathered in the background
// after the optimizer step, bucket by bucket in forward order, and the next step's forward waits
// per layer for its own buckets only. Shown structurally, with no timing: the gather of the last
// layer's bucket is held back until the next step's forward has run past the first layer, which
// it can only do if that forward does not wait for the held bucket. A forward that waited for
// every bucket would never get there: the hold would end at its own deadline and the test fail.
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include <boost/test/unit_test.hpp>

#include "dataparallel/bucket_reducer.h"
#include "dataparallel/gloo_collective.h"
#include "dataparallel/run_per_rank.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "models/layers/simple.h"
#include "pipeline/stage_executor.h"
#include "rpc/in_process_transport.h"
#include "rpc/store.h"

using namespace pw;
using namespace std::chrono_literals;

namespace {

constexpr int kReplicas = 2;
constexpr int kMicroBatches = 2;

// Counts the forward passes that reached it (training mode), and lets a thread wait for a count.
class Progress {
 public:
  void add() {
    {
      std::lock_guard lock(mutex_);
      ++count_;
    }
    changed_.notify_all();
  }
  // Whether the count reached `count` before `deadline` (or before a cancel).
  bool wait_for(int count, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    changed_.wait_until(lock, deadline, [&] { return count_ >= count || cancelled_; });
    return count_ >= count;
  }
  void cancel() {
    {
      std::lock_guard lock(mutex_);
      cancelled_ = true;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int count_ = 0;
  bool cancelled_ = false;
};

// A ReLU that reports every training forward that reaches it: placed after the first linear layer.
class ProbedRelu : public models::ReLU {
 public:
  explicit ProbedRelu(std::shared_ptr<Progress> progress) : progress_(std::move(progress)) {}

 protected:
  Output forward_impl(const kernels::Tensor& x, models::Mode mode) override {
    if (mode == models::Mode::Train) progress_->add();
    return ReLU::forward_impl(x, mode);
  }

 private:
  std::shared_ptr<Progress> progress_;
};

// Gloo, except that the all-gather numbered `held_call` (0: the first) does not start until the
// probe has seen `release_at` forwards, or until the hold's deadline or a cancel.
class HeldGather : public dp::Collective {
 public:
  HeldGather(std::shared_ptr<dp::Collective> inner, std::shared_ptr<Progress> progress)
      : inner_(std::move(inner)), progress_(std::move(progress)) {}
  void hold(int call, int release_at) {
    held_call_ = call;
    release_at_ = release_at;
  }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void allreduce_sum(kernels::Tensor& data, dp::Compression c) override { inner_->allreduce_sum(data, c); }
  void broadcast(kernels::Tensor& data, int root) override { inner_->broadcast(data, root); }
  void reduce_scatter_sum(kernels::Tensor& data, dp::Compression c) override { inner_->reduce_scatter_sum(data, c); }
  void all_gather(kernels::Tensor& data) override {
    if (calls_++ == held_call_) {
      held_ = true;
      released_by_forward_ = progress_->wait_for(release_at_, std::chrono::steady_clock::now() + 30s);
    }
    inner_->all_gather(data);
  }
  void cancel() noexcept override {
    progress_->cancel();
    inner_->cancel();
  }

  std::atomic<bool> held_{false};
  std::atomic<bool> released_by_forward_{false};

 private:
  std::shared_ptr<dp::Collective> inner_;
  std::shared_ptr<Progress> progress_;
  int calls_ = 0;   // the reducer's thread alone calls all_gather
  int held_call_ = -1;
  int release_at_ = 0;
};

std::unique_ptr<models::Sequential> mlp(const std::shared_ptr<Progress>& progress) {
  auto m = std::make_unique<models::Sequential>();
  m->add("fc0", std::make_unique<models::Linear>(16, 16));
  m->add("probe", std::make_unique<ProbedRelu>(progress));
  m->add("fc1", std::make_unique<models::Linear>(16, 16));
  m->add("relu1", std::make_unique<models::ReLU>());
  m->add("fc2", std::make_unique<models::Linear>(16, 16));
  m->add("relu2", std::make_unique<models::ReLU>());
  m->add("fc3", std::make_unique<models::Linear>(16, 8));
  m->initialize(7);   // the same weights on every replica
  return m;
}

pipeline::MicroBatchInputs inputs(int replica, int step) {
  pipeline::MicroBatchInputs in;
  for (int m = 0; m < kMicroBatches; ++m) {
    std::vector<float> x(4 * 16);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>((static_cast<int>(i) * 7 + m * 3 + replica * 5 + step * 11) % 13) / 13.0f - 0.5f;
    in.images.push_back(kernels::Tensor::from_vector(x, {4, 16}));
    in.labels.push_back(kernels::Tensor::from_vector(std::vector<std::int64_t>{1, 3, 5, 7}, {4}));
  }
  return in;
}

// Replica r's single GPipe stage of kMicroBatches, its gradients synchronised by `reducer`.
pipeline::StageConfig one_stage(kernels::Device device, int r, dp::BucketReducer& reducer,
                                std::chrono::milliseconds timeout) {
  pipeline::StageConfig config;
  config.spec = {pipeline::ScheduleKind::GPipe, 1, kMicroBatches, 1};
  config.device = device;
  config.replica = r;
  config.gradient_sync = &reducer;
  config.timeout = timeout;
  return config;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(weight_gather_overlap)

BOOST_AUTO_TEST_CASE(the_next_forward_runs_its_first_layers_while_a_later_bucket_is_still_gathering) {
  rpc::InMemoryStore store;
  std::vector<std::shared_ptr<dp::Collective>> gloo(kReplicas);
  dp::run_per_rank(kReplicas, [&](int r) {
    gloo[static_cast<std::size_t>(r)] = std::make_shared<dp::GlooCollective>(r, kReplicas, store, "overlap/", "127.0.0.1", 30000ms);
  });
  std::vector<std::vector<std::vector<float>>> weights(kReplicas);
  std::vector<std::shared_ptr<HeldGather>> held(kReplicas);
  std::vector<std::size_t> buckets(kReplicas);
  dp::run_per_rank(kReplicas, [&](int r) {
    auto progress = std::make_shared<Progress>();
    held[static_cast<std::size_t>(r)] = std::make_shared<HeldGather>(gloo[static_cast<std::size_t>(r)], progress);
    auto& collective = *held[static_cast<std::size_t>(r)];
    std::vector<std::unique_ptr<models::Sequential>> chunks;
    chunks.push_back(mlp(progress));
    const auto device = kernels::Device::cpu(r);
    chunks[0]->to(device);
    // One parameter per bucket: every weight and bias is gathered on its own, fc0's first.
    dp::BucketReducer reducer(chunks[0]->parameters(), held[static_cast<std::size_t>(r)],
                              dp::BucketOptions{1, dp::Compression::None, dp::OptimizerState::Sharded},
                              dp::TraceTrack{0, r});
    buckets[static_cast<std::size_t>(r)] = reducer.bucket_count();
    // Step 0's forwards reach the probe kMicroBatches times before its update; the gather after
    // it holds its last bucket (fc3.bias, which the forward uses last) until step 1's first
    // forward has passed fc0 and reached the probe.
    collective.hold(static_cast<int>(reducer.bucket_count()) - 1, kMicroBatches + 1);
    rpc::InProcessHub hub(1);
    auto transport = hub.endpoint(0);
    const auto config = one_stage(device, r, reducer, 60s);
    models::OptimizerConfig adam;
    adam.kind = models::OptimizerKind::Adam;
    adam.lr = 0.01;
    pipeline::StageExecutor stage(config, std::move(chunks), adam, *transport);
    for (int step = 0; step < 2; ++step) stage.run_step(step, inputs(r, step));
    reducer.await_all_weights(std::chrono::steady_clock::now() + 60s);
    for (auto* p : stage.parameters()) weights[static_cast<std::size_t>(r)].push_back(p->value.to_float_vector());
  });
  BOOST_TEST(buckets[0] == 8u);
  for (int r = 0; r < kReplicas; ++r) {
    BOOST_TEST_CONTEXT("replica " << r) {
      BOOST_TEST(held[static_cast<std::size_t>(r)]->held_.load());
      BOOST_TEST(held[static_cast<std::size_t>(r)]->released_by_forward_.load(),
                 "step 1's forward did not reach the layer after fc0 while fc3's bucket was held back");
    }
  }
  // The held bucket arrived after all: the replicas end with the same bits.
  BOOST_REQUIRE_EQUAL(weights[0].size(), weights[1].size());
  for (std::size_t i = 0; i < weights[0].size(); ++i)
    BOOST_TEST(std::memcmp(weights[0][i].data(), weights[1][i].data(), weights[0][i].size() * sizeof(float)) == 0);
}

// A layer whose bucket never arrives waits until the stage's deadline, and the error names the
// replica, the stage, the step and micro-batch, and the bucket it waited for.
BOOST_AUTO_TEST_CASE(a_forward_waiting_past_its_deadline_names_the_bucket) {
  rpc::InMemoryStore store;
  std::vector<std::shared_ptr<dp::Collective>> gloo(kReplicas);
  dp::run_per_rank(kReplicas, [&](int r) {
    gloo[static_cast<std::size_t>(r)] = std::make_shared<dp::GlooCollective>(r, kReplicas, store, "late/", "127.0.0.1", 30000ms);
  });
  std::vector<std::string> errors(kReplicas);
  dp::run_per_rank(kReplicas, [&](int r) {
    auto progress = std::make_shared<Progress>();   // never reaches what the hold waits for
    auto collective = std::make_shared<HeldGather>(gloo[static_cast<std::size_t>(r)], progress);
    std::vector<std::unique_ptr<models::Sequential>> chunks;
    chunks.push_back(mlp(progress));
    const auto device = kernels::Device::cpu(r);
    chunks[0]->to(device);
    dp::BucketReducer reducer(chunks[0]->parameters(), collective,
                              dp::BucketOptions{1, dp::Compression::None, dp::OptimizerState::Sharded},
                              dp::TraceTrack{0, r});
    collective->hold(0, 1000);   // fc0.weight's gather, the first, until the hold's own 30 s end
    rpc::InProcessHub hub(1);
    auto transport = hub.endpoint(0);
    // Step 0's reduce-scatters run under this deadline too: a loaded machine may pause a thread.
    const auto config = one_stage(device, r, reducer, 3s);
    pipeline::StageExecutor stage(config, std::move(chunks), {}, *transport);
    stage.run_step(0, inputs(r, 0));
    try {
      stage.run_step(1, inputs(r, 1));
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    }
    reducer.abort("the test is over");   // the held gather ends with the abort
  });
  for (int r = 0; r < kReplicas; ++r) {
    const auto& e = errors[static_cast<std::size_t>(r)];
    BOOST_TEST_CONTEXT("replica " << r << ": " << e) {
      BOOST_TEST(e.find("replica " + std::to_string(r) + " of 2, stage 0") != std::string::npos);
      BOOST_TEST(e.find("step 1") != std::string::npos);
      BOOST_TEST(e.find("micro-batch 0") != std::string::npos);
      BOOST_TEST(e.find("layer 'fc0'") != std::string::npos);
      // fc0.weight: reduced last, gathered first.
      BOOST_TEST(e.find("all-gather of bucket 7 of 8 (weights 'weight')") != std::string::npos);
      BOOST_TEST(e.find("updated in step 0") != std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
