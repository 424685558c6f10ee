// The registry of a stage's server-backed rows, driven by the stage executor: its optimizer step
// counts, scales and pushes exactly the registered layers' gradients (as the stage's worker), a
// skipped step discards them, a stage with none registered pushes nothing, and the step-ahead
// prefetch hands each registered layer its own ids on the first stage only. No servers: the
// layers here record what they were asked.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "dataparallel/ps/remote_rows_registry.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "pipeline/stage_executor.h"
#include "rpc/in_process_transport.h"

using namespace pw;
using kernels::Tensor;

namespace {

constexpr int kFeatures = 4, kBatch = 3, kMicroBatches = 2;

// Passes its input through; its "rows" gradient is the output gradient it saw, summed over the
// step's micro-batches, until a push takes it.
class RecordingRows : public models::Layer, public dp::RemoteRows {
 public:
  struct Push {
    int worker;
    dp::RemoteGradients what;
    double sum_of_squares;   // of what it held when pushed (before a discard clears it)
  };
  std::string type_name() const override { return "RecordingRows"; }

  void set_worker(int worker) override { worker_ = worker; }
  double gradient_sum_of_squares() const override {
    double sum = 0.0;
    for (double v : pending_) sum += v * v;
    return sum;
  }
  void scale_gradients(double factor) override {
    for (double& v : pending_) v *= factor;
  }
  dp::PendingRows pending_rows() const override {   // one row, key 0
    if (pending_.empty()) return {};
    return {{0}, std::vector<float>(pending_.begin(), pending_.end())};
  }
  void push_gradients(int worker, dp::RemoteGradients what) override {
    pushes.push_back({worker, what, gradient_sum_of_squares()});
    pending_.clear();
  }
  void prefetch(const std::vector<Tensor>& next_micro_batches) override { prefetched.push_back(next_micro_batches); }
  void flush() override { ++flushes; }
  void reconnect() override { ++reconnects; }

  int worker() const { return worker_; }
  std::vector<Push> pushes;
  std::vector<std::vector<Tensor>> prefetched;
  int flushes = 0, reconnects = 0;

 protected:
  Output forward_impl(const Tensor& x, models::Mode) override { return {x.clone(), std::make_unique<models::Context>()}; }
  Tensor backward_input_impl(models::Context&, const Tensor& grad_y) override {
    const auto g = grad_y.to_float_vector();
    if (pending_.empty()) pending_.assign(g.size(), 0.0);
    for (std::size_t i = 0; i < g.size(); ++i) pending_[i] += g[i];
    return grad_y.clone();
  }
  kernels::Shape output_shape_impl(const kernels::Shape& input) const override { return input; }

 private:
  int worker_ = 0;
  std::vector<double> pending_;
};

// Records what the executor reported, and answers with a fixed decision.
class FixedCheck : public pipeline::UpdateCheck {
 public:
  explicit FixedCheck(pipeline::UpdateDecision decision) : decision_(decision) {}
  pipeline::UpdateDecision report(std::int64_t, const pipeline::GradientShare&, double remote_squares,
                                  double) override {
    reported.push_back(remote_squares);
    return {};
  }
  pipeline::UpdateDecision verdict(std::int64_t) override { return decision_; }
  std::vector<double> reported;

 private:
  pipeline::UpdateDecision decision_;
};

// The first feature column of each sample, as ids [N, 1].
Tensor first_column(const Tensor& x) {
  const auto v = x.to_float_vector();
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < x.dim(0); ++i) ids.push_back(static_cast<std::int64_t>(v[static_cast<std::size_t>(i * x.dim(1))]));
  return Tensor::from_vector(ids, {x.dim(0), 1});
}

// One stage holding: "registered" (built under the registry's scope, with ids from the input),
// "quiet" (registered, no ids), "unregistered" (built outside any scope), then a Linear to two
// classes. The executor's update check is `check`; its remote rows the registry, unless `rows`
// names others (nullptr: none).
struct Stage {
  explicit Stage(int worker, int stage = 0, int stages = 1, pipeline::UpdateCheck* check = nullptr,
                 std::optional<pipeline::RemoteRowsSync*> rows = std::nullopt)
      : registry(worker), hub(stages) {
    auto chunk = std::make_unique<models::Sequential>();
    {
      dp::RemoteRowsRegistry::BuildScope scope(registry);
      auto a = std::make_unique<RecordingRows>();
      auto b = std::make_unique<RecordingRows>();
      dp::RemoteRowsRegistry::building()->add(*a, first_column);
      dp::RemoteRowsRegistry::building()->add(*b);
      registered = a.get();
      quiet = b.get();
      chunk->add("registered", std::move(a));
      chunk->add("quiet", std::move(b));
    }
    BOOST_REQUIRE(dp::RemoteRowsRegistry::building() == nullptr);
    auto c = std::make_unique<RecordingRows>();
    unregistered = c.get();
    chunk->add("unregistered", std::move(c));
    chunk->add("fc", std::make_unique<models::Linear>(kFeatures, 2));
    chunk->initialize(7);
    transport = hub.endpoint(stage);
    pipeline::StageConfig config;
    config.spec = {pipeline::ScheduleKind::GPipe, stages, kMicroBatches, 1};
    config.stage = stage;
    config.device = kernels::Device::cpu();
    config.replica = worker;
    config.remote_rows = rows ? *rows : &registry;
    config.update_check = check;
    std::vector<std::unique_ptr<models::Sequential>> chunks;
    chunks.push_back(std::move(chunk));
    executor = std::make_unique<pipeline::StageExecutor>(config, std::move(chunks), models::OptimizerConfig{}, *transport);
  }

  pipeline::StageStepResult step(std::int64_t s) { return executor->run_step(s, inputs(s)); }

  static pipeline::MicroBatchInputs inputs(std::int64_t s) {
    pipeline::MicroBatchInputs in;
    for (int m = 0; m < kMicroBatches; ++m) {
      std::vector<float> x;
      std::vector<std::int64_t> labels;
      for (int i = 0; i < kBatch; ++i) {
        for (int f = 0; f < kFeatures; ++f) x.push_back(static_cast<float>((s * 7 + m * 5 + i * 3 + f) % 11));
        labels.push_back((i + m) % 2);
      }
      in.images.push_back(Tensor::from_vector(x, {kBatch, kFeatures}));
      in.labels.push_back(Tensor::from_vector(labels, {kBatch}));
    }
    return in;
  }

  dp::RemoteRowsRegistry registry;
  rpc::InProcessHub hub;
  std::unique_ptr<rpc::Transport> transport;
  RecordingRows* registered = nullptr;
  RecordingRows* quiet = nullptr;
  RecordingRows* unregistered = nullptr;
  std::unique_ptr<pipeline::StageExecutor> executor;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(remote_rows_registry)

BOOST_AUTO_TEST_CASE(registration_gives_each_layer_the_stage_worker) {
  Stage s(3);
  BOOST_TEST(s.registry.size() == 2u);
  BOOST_TEST(s.registered->worker() == 3);
  BOOST_TEST(s.quiet->worker() == 3);
  BOOST_TEST(s.unregistered->worker() == 0);
}

BOOST_AUTO_TEST_CASE(the_update_step_counts_and_pushes_exactly_the_registered_layers) {
  FixedCheck check({pipeline::UpdateAction::Apply, 1.0});
  Stage s(1, 0, 1, &check);
  s.step(0);
  BOOST_REQUIRE_EQUAL(s.registered->pushes.size(), 1u);
  BOOST_REQUIRE_EQUAL(s.quiet->pushes.size(), 1u);
  BOOST_TEST(s.unregistered->pushes.empty());
  const auto& pushed = s.registered->pushes.front();
  BOOST_TEST(pushed.worker == 1);
  BOOST_TEST((pushed.what == dp::RemoteGradients::Push));
  BOOST_TEST(pushed.sum_of_squares > 0.0);
  // The norm the step reported holds the registered rows' gradients and nothing else.
  BOOST_REQUIRE_EQUAL(check.reported.size(), 1u);
  const double registered = pushed.sum_of_squares + s.quiet->pushes.front().sum_of_squares;
  BOOST_TEST(check.reported.front() == registered, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(s.unregistered->gradient_sum_of_squares() > 0.0);   // held, never pushed
}

BOOST_AUTO_TEST_CASE(a_clipped_step_scales_the_registered_gradients_and_a_skipped_one_discards_them) {
  FixedCheck apply({pipeline::UpdateAction::Apply, 1.0});
  FixedCheck half({pipeline::UpdateAction::Apply, 0.5});
  FixedCheck skip({pipeline::UpdateAction::Skip, 1.0});
  Stage unscaled(0, 0, 1, &apply), clipped(0, 0, 1, &half), skipped(0, 0, 1, &skip);
  unscaled.step(0);
  clipped.step(0);
  skipped.step(0);
  const double full = unscaled.registered->pushes.at(0).sum_of_squares;
  BOOST_TEST(clipped.registered->pushes.at(0).sum_of_squares == 0.25 * full, boost::test_tools::tolerance(1e-12));
  BOOST_REQUIRE_EQUAL(skipped.registered->pushes.size(), 1u);   // the step still counts as the worker's
  BOOST_TEST((skipped.registered->pushes.at(0).what == dp::RemoteGradients::Discard));
}

BOOST_AUTO_TEST_CASE(a_stage_with_no_registered_layers_pushes_nothing) {
  dp::RemoteRowsRegistry empty(0);
  FixedCheck check({pipeline::UpdateAction::Apply, 1.0});
  Stage with_empty(0, 0, 1, &check, &empty);
  with_empty.step(0);
  Stage with_none(0, 0, 1, &check, nullptr);
  with_none.step(1);
  for (const Stage* s : {&with_empty, &with_none}) {
    BOOST_TEST(s->registered->pushes.empty());
    BOOST_TEST(s->quiet->pushes.empty());
    BOOST_TEST(s->unregistered->pushes.empty());
  }
  BOOST_TEST(check.reported == std::vector<double>({0.0, 0.0}));
}

BOOST_AUTO_TEST_CASE(prefetch_hands_registered_layers_their_ids_on_the_first_stage_only) {
  Stage first(0);
  const auto next = Stage::inputs(1).images;
  first.executor->prefetch_remote(next);
  BOOST_REQUIRE_EQUAL(first.registered->prefetched.size(), 1u);
  const auto& ids = first.registered->prefetched.front();
  BOOST_REQUIRE_EQUAL(ids.size(), next.size());
  for (std::size_t m = 0; m < next.size(); ++m) {
    BOOST_TEST((ids[m].dtype() == kernels::DType::I64));
    BOOST_TEST(ids[m].to_double_vector() == first_column(next[m]).to_double_vector());
  }
  BOOST_TEST(first.quiet->prefetched.empty());   // no ids from the model's input: pulls in its forward
  BOOST_TEST(first.unregistered->prefetched.empty());

  Stage second(0, 1, 2);
  second.executor->prefetch_remote(next);
  BOOST_TEST(second.registered->prefetched.empty());
}

// Fixed rows by key, for the norm over replicas.
class FixedRows : public dp::RemoteRows {
 public:
  explicit FixedRows(dp::PendingRows rows) : rows_(std::move(rows)) {}
  void set_worker(int) override {}
  double gradient_sum_of_squares() const override {
    double sum = 0.0;
    for (float v : rows_.rows) sum += static_cast<double>(v) * v;
    return sum;
  }
  void scale_gradients(double) override {}
  dp::PendingRows pending_rows() const override { return rows_; }
  void push_gradients(int, dp::RemoteGradients) override {}
  void prefetch(const std::vector<Tensor>&) override {}
  void flush() override {}
  void reconnect() override {}

 private:
  dp::PendingRows rows_;
};

BOOST_AUTO_TEST_CASE(with_a_replica_exchange_the_norm_is_that_of_the_rows_summed_by_key) {
  // Replica 0 and 1 both touched key 7; only replica 1 touched key 9.
  FixedRows r0(dp::PendingRows{{2, 7}, {1.0f, 1.0f, 0.5f, 0.5f}});
  FixedRows r1(dp::PendingRows{{7, 9}, {0.5f, -0.5f, 3.0f, 0.0f}});
  dp::RemoteRowsRegistry replica0(0), replica1(1);
  replica0.add(r0);
  replica1.add(r1);
  BOOST_TEST(replica0.gradient_sum_of_squares() == 2.5);   // its own, without an exchange
  std::vector<std::vector<dp::PendingRows>> seen;
  const auto exchange = [&](const std::vector<dp::PendingRows>&) {
    std::vector<std::vector<dp::PendingRows>> all = {{r0.pending_rows()}, {r1.pending_rows()}};
    seen.push_back(all.front());
    return all;
  };
  replica0.set_replica_exchange(exchange);
  replica1.set_replica_exchange(exchange);
  // Key 2: 1 + 1; key 7: (0.5 + 0.5)^2 + (0.5 - 0.5)^2; key 9: 9.
  BOOST_TEST(replica0.gradient_sum_of_squares() == 12.0);
  BOOST_TEST(replica1.gradient_sum_of_squares() == 12.0);
  BOOST_TEST(seen.size() == 2u);   // once per call, on every replica
}

BOOST_AUTO_TEST_CASE(a_replica_with_non_finite_rows_reports_them_and_the_others_their_own) {
  FixedRows finite(dp::PendingRows{{1}, {2.0f}});
  FixedRows broken(dp::PendingRows{{1}, {std::nanf("")}});
  dp::RemoteRowsRegistry replica0(0), replica1(1);
  replica0.add(finite);
  replica1.add(broken);
  const auto exchange = [&](const std::vector<dp::PendingRows>&) {
    return std::vector<std::vector<dp::PendingRows>>{{finite.pending_rows()}, {broken.pending_rows()}};
  };
  replica0.set_replica_exchange(exchange);
  replica1.set_replica_exchange(exchange);
  BOOST_TEST(replica0.gradient_sum_of_squares() == 4.0);
  BOOST_TEST(std::isnan(replica1.gradient_sum_of_squares()));
}

BOOST_AUTO_TEST_CASE(flush_and_reconnect_reach_every_registered_layer) {
  Stage s(0);
  s.executor->flush_remote();
  s.registry.reconnect();
  BOOST_TEST(s.registered->flushes == 1);
  BOOST_TEST(s.quiet->flushes == 1);
  BOOST_TEST(s.unregistered->flushes == 0);
  BOOST_TEST(s.registered->reconnects == 1);
  BOOST_TEST(s.unregistered->reconnects == 0);
}

BOOST_AUTO_TEST_CASE(build_scopes_nest) {
  dp::RemoteRowsRegistry outer(0), inner(1);
  BOOST_TEST(dp::RemoteRowsRegistry::building() == nullptr);
  {
    dp::RemoteRowsRegistry::BuildScope a(outer);
    {
      dp::RemoteRowsRegistry::BuildScope b(inner);
      BOOST_TEST(dp::RemoteRowsRegistry::building() == &inner);
    }
    BOOST_TEST(dp::RemoteRowsRegistry::building() == &outer);
  }
  BOOST_TEST(dp::RemoteRowsRegistry::building() == nullptr);
}

BOOST_AUTO_TEST_SUITE_END()
