// A training job's parameter servers (train::ParameterServers, run in this process) in a job
// checkpoint: the DLRM tables as the job's layers use them, saved at a step boundary and brought
// back, with the layers of a resumed job carrying on at the saved step.
#include <filesystem>
#include <random>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "kernels/tensor.h"
#include "models/layer.h"
#include "models/zoo/model_spec.h"
#include "tests/dataparallel/ps/test_servers.h"
#include "train/job_config.h"
#include "train/parameter_servers.h"

using namespace pw;
using kernels::Tensor;
using models::Mode;
using pw::test::error_of;
namespace fs = std::filesystem;

namespace {

constexpr int kFeatures = 2, kDim = 4, kBag = 2, kReplicas = 2, kBatch = 6;
constexpr std::int64_t kTableRows = 300;

train::JobConfig job(int servers) {
  train::JobConfig c;
  c.replicas.replicas = kReplicas;
  c.ps.servers = servers;
  c.ps.mode = dp::UpdateMode::Sync;
  c.ps.optimizer = dp::SparseOptimizerKind::Adam;
  c.seed = 11;
  return c;
}

models::ModelSpec dlrm_spec() {
  models::ModelOptions mo;
  mo.clicks.table_sizes.assign(kFeatures, kTableRows);
  mo.clicks.bag_size = kBag;
  mo.embedding_dim = kDim;
  mo.embedding_tables = models::TablePlacement::ParameterServers;
  return models::make_model_spec("dlrm", mo);
}

std::vector<std::string> table_names() {
  std::vector<std::string> names;
  for (const auto& t : dlrm_spec().embedding_tables) names.push_back(t.name);
  return names;
}

// Each replica's bag layer for every feature, as the job's first stage builds them.
struct Layers {
  Layers(train::ParameterServers& ps, const train::JobConfig& c) {
    const auto spec = dlrm_spec();
    const auto make_bag = ps.table_maker(c);
    for (int r = 0; r < kReplicas; ++r)
      for (int f = 0; f < kFeatures; ++f) {
        layers[r][f] = make_bag(spec.embedding_tables.at(static_cast<std::size_t>(f)));
        bags[r][f] = &dynamic_cast<dp::PsEmbeddingBag&>(*layers[r][f]);
      }
  }
  std::unique_ptr<models::Layer> layers[kReplicas][kFeatures];
  dp::PsEmbeddingBag* bags[kReplicas][kFeatures];
};

Tensor ids_of(std::int64_t step, int replica, int feature) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(step * 100 + replica * 10 + feature));
  std::uniform_int_distribution<std::int64_t> id(0, kTableRows - 1);
  std::vector<std::int64_t> v(kBatch * kBag);
  for (auto& x : v) x = id(rng);
  return Tensor::from_vector(v, {kBatch, kBag});
}

// One job step: every replica's bags forward, backward and push (replica after replica, so a
// sync pull of the next step finds the step before applied).
void train_step(Layers& l, std::int64_t step) {
  for (int r = 0; r < kReplicas; ++r)
    for (int f = 0; f < kFeatures; ++f) {
      auto& bag = *l.bags[r][f];
      auto out = bag.forward(ids_of(step, r, f), Mode::Train);
      bag.backward(*out.ctx, Tensor::full({kBatch, kDim}, 0.1 * static_cast<double>(f + 1) - 0.03 * static_cast<double>(step)));
      bag.push_gradients(r, dp::RemoteGradients::Push);
    }
}

// Every feature's rows for a fixed set of ids, read without waiting once every replica's pushes
// (which leave in the background) are answered, as Engine::evaluate does.
std::vector<std::vector<float>> rows(Layers& l) {
  for (auto& replica : l.bags)
    for (auto* bag : replica) bag->flush();
  std::vector<std::vector<float>> out;
  for (int f = 0; f < kFeatures; ++f) {
    std::vector<std::int64_t> all(kTableRows);
    for (std::int64_t k = 0; k < kTableRows; ++k) all[static_cast<std::size_t>(k)] = k;
    const Tensor y = l.bags[0][f]->forward(Tensor::from_vector(all, {kTableRows / kBag, kBag}), Mode::Eval).y;
    out.emplace_back(y.data<float>(), y.data<float>() + y.numel());
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(parameter_servers_in_job_checkpoints)

BOOST_AUTO_TEST_CASE(embedded_servers_come_back_to_the_checkpointed_step_and_the_job_carries_on) {
  const auto folder = fs::temp_directory_path() / ("pw_ps_job_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(folder);
  const auto c = job(2);
  auto ps = train::ParameterServers::open(c, table_names(), false);
  BOOST_REQUIRE(ps);
  std::vector<std::vector<float>> at_3, at_5;
  {
    Layers l(*ps, c);
    for (std::int64_t step = 0; step < 3; ++step) train_step(l, step);
    at_3 = rows(l);
    const auto files = ps->checkpoint((folder / "step-3").string(), 3);
    BOOST_TEST(files.size() == 2u * (kFeatures + 1));
    BOOST_TEST(files.front().path == "shard-0/features.emb.0.table");
    BOOST_TEST(files.back().path == "shard-1/manifest.json");
    for (const auto& f : files) BOOST_TEST(fs::file_size(folder / "step-3" / f.path) == static_cast<std::uintmax_t>(f.bytes));
    for (std::int64_t step = 3; step < 5; ++step) train_step(l, step);
    at_5 = rows(l);
    BOOST_TEST(at_5 != at_3);
  }
  // A resumed job: the servers restored, then new layers that continue at step 3.
  ps->restore((folder / "step-3").string());
  Layers resumed(*ps, c);
  BOOST_TEST(rows(resumed) == at_3);   // bitwise
  for (std::int64_t step = 3; step < 5; ++step) train_step(resumed, step);
  BOOST_TEST(rows(resumed) == at_5);

  // Three servers cannot take a checkpoint of two.
  auto three = train::ParameterServers::open(job(3), table_names(), false);
  const auto message = error_of([&] { three->restore((folder / "step-3").string()); });
  BOOST_TEST(message.find((folder / "step-3").string() + " holds a parameter-server checkpoint of 2 shards; this job has 3") !=
                 std::string::npos,
             message);
  fs::remove_all(folder);
}

BOOST_AUTO_TEST_SUITE_END()
