// The stage executor on its own: a stage whose neighbour never sends waits out its deadline and
// names itself, the micro-batch and what it waited for.
#include <boost/test/unit_test.hpp>

#include "models/zoo/model_spec.h"
#include "partition/model_description.h"
#include "pipeline/stage_executor.h"
#include "rpc/in_process_transport.h"

using namespace pw;
using namespace pw::pipeline;
using kernels::Device;

namespace {

partition::ModelDescription seed_cnn() {
  models::ModelOptions o;
  o.sample_shape = {1, 12, 12};
  return partition::describe(models::make_model_spec("seed-cnn", o));
}

ScheduleSpec spec(ScheduleKind kind, int stages, int micro_batches) { return {kind, stages, micro_batches, 1}; }

}  // namespace

BOOST_AUTO_TEST_SUITE(stage_executor)

BOOST_AUTO_TEST_CASE(a_stage_waiting_past_its_deadline_names_itself_and_what_it_waited_for) {
  const auto model = seed_cnn();
  const auto partition = partition::split_at(model.layer_count(), {3});
  rpc::InProcessHub hub(2);
  auto transport = hub.endpoint(1);
  StageConfig config;
  config.spec = spec(ScheduleKind::OneFOneB, 2, 2);
  config.stage = 1;
  config.device = Device::cpu(1);
  config.timeout = std::chrono::milliseconds(200);
  std::vector<std::unique_ptr<models::Sequential>> chunks;
  chunks.push_back(partition::build_stage(model, partition[1], 1));
  StageExecutor stage(config, std::move(chunks), {}, *transport);
  MicroBatchInputs inputs;
  for (int i = 0; i < 2; ++i) {
    inputs.images.push_back(kernels::Tensor::zeros({4, 1, 12, 12}));
    inputs.labels.push_back(kernels::Tensor::zeros({4}, kernels::DType::I64));
  }
  try {
    stage.run_step(0, inputs);
    BOOST_FAIL("expected a timeout");
  } catch (const rpc::TimeoutError& e) {
    const std::string msg = e.what();
    BOOST_CHECK_MESSAGE(msg.find("stage 1 (cpu:1)") != std::string::npos, msg);
    BOOST_CHECK_MESSAGE(msg.find("micro-batch 0") != std::string::npos, msg);
    BOOST_CHECK_MESSAGE(msg.find("activation") != std::string::npos, msg);
    BOOST_CHECK_MESSAGE(msg.find("from rank 0") != std::string::npos, msg);
  }
}

BOOST_AUTO_TEST_SUITE_END()
