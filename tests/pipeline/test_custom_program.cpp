// The executor runs the program it is given: hand-written programs (GPipe's order, explicit
// Recompute) train a 2-stage pipeline to the same losses and weights as the default 1F1B, and a
// backward whose context was dropped for a Recompute that has not run is an error naming both.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <future>

#include "models/data/data_loader.h"
#include "models/data/dataset.h"
#include "partition/partitioners.h"
#include "pipeline/micro_batch.h"
#include "pipeline/stage_executor.h"
#include "pipeline/stage_worker.h"
#include "rpc/in_process_transport.h"

using namespace pw;
using namespace pw::pipeline;
using kernels::Device;

namespace {

const ScheduleSpec kSpec{ScheduleKind::OneFOneB, 2, 4, 1};

partition::ModelDescription seed_cnn() {
  models::ModelOptions o;
  o.sample_shape = {1, 12, 12};
  return partition::describe(models::make_model_spec("seed-cnn", o));   // conv1 relu1 pool1 flatten fc1 relu2 fc2
}

struct Run {
  std::vector<double> losses;
  std::vector<std::vector<double>> weights;   // every parameter, stage by stage
  int recomputes = 0;                          // stages x steps that ran a Recompute
};

// Trains seed-cnn split after its third layer on two stages (cpu:0, cpu:1), one thread each.
// programs[s] empty: the executor's default for `recompute`.
Run train_programs(const std::vector<std::string>& programs, RecomputeMode recompute = RecomputeMode::None, int steps = 3) {
  const auto model = seed_cnn();
  const auto split = partition::split_at(model.layer_count(), {3});
  rpc::InProcessHub hub(kSpec.stages);
  std::vector<std::unique_ptr<rpc::Transport>> transports;
  std::vector<std::unique_ptr<StageExecutor>> executors;
  std::vector<std::unique_ptr<StageWorker>> workers;
  models::OptimizerConfig optimizer;
  optimizer.kind = models::OptimizerKind::Sgd;
  optimizer.lr = 0.05;
  for (int s = 0; s < kSpec.stages; ++s) {
    const auto su = static_cast<std::size_t>(s);
    StageConfig config;
    config.spec = kSpec;
    config.stage = s;
    config.device = Device::cpu(s);
    config.recompute = recompute;
    config.program = from_text(programs[su]);
    config.timeout = std::chrono::seconds(20);
    std::vector<std::unique_ptr<models::Sequential>> chunks;
    {
      models::LayerDeviceScope on_device(config.device);
      chunks.push_back(partition::build_stage(model, split[su], 11));
    }
    transports.push_back(hub.endpoint(s));
    executors.push_back(std::make_unique<StageExecutor>(config, std::move(chunks), optimizer, *transports[su]));
    workers.push_back(std::make_unique<StageWorker>());
  }
  auto data = models::data::make_synthetic_images(256, {1, 12, 12}, 10, 5);
  models::data::DataLoader loader(*data, 16, models::data::Shuffle::Yes, 3, models::data::LastBatch::Drop);
  loader.start_epoch(0);
  Run run;
  for (int step = 0; step < steps; ++step) {
    const auto batch = *loader.next();
    const MicroBatchInputs inputs{split_batch(batch.images, kSpec.micro_batches),
                                  split_batch(batch.labels, kSpec.micro_batches)};
    std::vector<StageStepResult> results(executors.size());
    std::vector<std::future<void>> done;
    for (std::size_t s = 0; s < executors.size(); ++s) {
      done.push_back(workers[s]->submit([&, s] {
        try {
          results[s] = executors[s]->run_step(step, inputs);
        } catch (...) {
          hub.abort("another stage failed");
          throw;
        }
      }));
    }
    for (auto& f : done) f.get();
    double loss_sum = 0.0;
    std::int64_t samples = 0;
    for (const auto& r : results) {
      loss_sum += r.loss_sum;
      samples += r.samples;
      run.recomputes += static_cast<int>(r.op_seconds.contains({OpType::Recompute, 0}));
    }
    run.losses.push_back(loss_sum / static_cast<double>(samples));
  }
  for (auto& e : executors)
    for (auto* p : e->parameters()) run.weights.push_back(p->value.to_double_vector());
  workers.clear();
  return run;
}

void check_same(const Run& got, const Run& want, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_REQUIRE_EQUAL(got.losses.size(), want.losses.size());
    for (std::size_t i = 0; i < got.losses.size(); ++i)
      BOOST_CHECK_SMALL(std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]), 1e-5);
    BOOST_REQUIRE_EQUAL(got.weights.size(), want.weights.size());
    for (std::size_t p = 0; p < want.weights.size(); ++p) {
      double num = 0, den = 0;
      for (std::size_t i = 0; i < want.weights[p].size(); ++i) {
        const double d = got.weights[p][i] - want.weights[p][i];
        num += d * d;
        den += want.weights[p][i] * want.weights[p][i];
      }
      BOOST_CHECK_SMALL(std::sqrt(num / den), 1e-5);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(custom_program)

BOOST_AUTO_TEST_CASE(hand_written_programs_train_like_the_default_1f1b) {
  const Run reference = train_programs({"", ""});
  BOOST_TEST(reference.recomputes == 0);
  BOOST_TEST(reference.losses[2] < reference.losses[0]);
  // GPipe's fill-drain order, written by hand for the 1f1b-shaped pipeline.
  check_same(train_programs({"F0 sA0 F1 sA1 F2 sA2 F3 sA3 rG0 B0 rG1 B1 rG2 B2 rG3 B3 RG S",
                    "rA0 F0 rA1 F1 rA2 F2 rA3 F3 B0 sG0 B1 sG1 B2 sG2 B3 sG3 RG S"}),
             reference, "gpipe order");
  // 1F1B with stage 0 recomputing micro-batches 1 and 3 only.
  const Run recomputing = train_programs({"F0 sA0 F1 sA1 rG0 B0 F2 sA2 rG1 R1 B1 F3 sA3 rG2 B2 rG3 R3 B3 RG S",
                                 "rA0 F0 B0 sG0 rA1 F1 B1 sG1 rA2 F2 B2 sG2 rA3 F3 B3 sG3 RG S"});
  BOOST_TEST(recomputing.recomputes == 3);   // stage 0, every step
  check_same(recomputing, reference, "1f1b with two explicit recomputes");
  // Split backwards (Bi then W) in 1F1B's order, the last stage recomputing before each Bi.
  check_same(train_programs({"F0 sA0 F1 sA1 rG0 Bi0 W0 F2 sA2 rG1 Bi1 W1 F3 sA3 rG2 Bi2 W2 rG3 Bi3 W3 RG S",
                    "rA0 F0 R0 Bi0 sG0 rA1 F1 R1 Bi1 sG1 W0 rA2 F2 R2 Bi2 sG2 W1 rA3 F3 R3 Bi3 sG3 W2 W3 RG S"}),
             reference, "split backwards with recompute");
}

BOOST_AUTO_TEST_CASE(recompute_mode_gives_the_same_steps_as_its_explicit_program) {
  const Run by_mode = train_programs({"", ""}, RecomputeMode::All);
  const Run by_hand = train_programs({"F0 sA0 F1 sA1 rG0 R0 B0 F2 sA2 rG1 R1 B1 F3 sA3 rG2 R2 B2 rG3 R3 B3 RG S",
                             "rA0 F0 R0 B0 sG0 rA1 F1 R1 B1 sG1 rA2 F2 R2 B2 sG2 rA3 F3 R3 B3 sG3 RG S"});
  BOOST_TEST(by_mode.losses == by_hand.losses, boost::test_tools::per_element());
  BOOST_CHECK(by_mode.weights == by_hand.weights);
  BOOST_TEST(by_mode.recomputes == 6);
  check_same(by_mode, train_programs({"", ""}), "recompute all against none");
}

BOOST_AUTO_TEST_CASE(executor_fills_in_the_default_program_once) {
  rpc::InProcessHub hub(2);
  auto transport = hub.endpoint(0);
  StageConfig config;
  config.spec = kSpec;
  config.recompute = RecomputeMode::ExceptLast;
  std::vector<std::unique_ptr<models::Sequential>> chunks;
  chunks.push_back(partition::build_stage(seed_cnn(), {0, 3}, 1));
  StageExecutor stage(config, std::move(chunks), {}, *transport);
  BOOST_TEST(to_text(stage.config().program, true) ==
             "F0 sA0 F1 sA1 rG0 R0 B0 F2 sA2 rG1 R1 B1 F3 sA3 rG2 R2 B2 rG3 R3 B3 RG S");
}

// One stage, so no neighbour is needed; the counts are right, the order is not.
BOOST_AUTO_TEST_CASE(a_backward_before_its_recompute_names_both) {
  rpc::InProcessHub hub(1);
  auto transport = hub.endpoint(0);
  StageConfig config;
  config.spec = {ScheduleKind::GPipe, 1, 1, 1};
  config.program = from_text("F0 B0 R0 RG S");
  std::vector<std::unique_ptr<models::Sequential>> chunks;
  const auto model = seed_cnn();
  chunks.push_back(partition::build_stage(model, {0, model.layer_count()}, 1));
  StageExecutor stage(config, std::move(chunks), {}, *transport);
  const MicroBatchInputs inputs{{kernels::Tensor::zeros({4, 1, 12, 12})},
                                {kernels::Tensor::zeros({4}, kernels::DType::I64)}};
  try {
    stage.run_step(0, inputs);
    BOOST_ERROR("expected an error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    BOOST_TEST(msg.starts_with("stage 0 (cpu:0), step 0, instruction B0 (micro-batch 0, chunk 0): no forward context: "
                               "the forward dropped it for R0, which has not run yet; the program must run R0 before "
                               "this backward"),
               msg);
  }
}

BOOST_AUTO_TEST_CASE(a_program_missing_an_instruction_is_rejected_before_it_runs) {
  rpc::InProcessHub hub(2);
  auto transport = hub.endpoint(1);
  StageConfig config;
  config.spec = kSpec;
  config.stage = 1;
  config.program = from_text("rA0 F0 B0 sG0 rA1 F1 B1 sG1 rA2 F2 B2 sG2 rA3 F3 B3 RG S");
  std::vector<std::unique_ptr<models::Sequential>> chunks;
  const auto model = seed_cnn();
  chunks.push_back(partition::build_stage(model, {3, model.layer_count()}, 1));
  try {
    StageExecutor stage(config, std::move(chunks), {}, *transport);
    BOOST_ERROR("expected InputError");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()) == "stage 1: 'sG3' is missing; stage 0 receives that gradient");
  }
}

BOOST_AUTO_TEST_SUITE_END()
