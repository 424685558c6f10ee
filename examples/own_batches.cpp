// A program that feeds the engine its own batches, a step at a time (pipewright/job.h): a click
// model whose embedding table may live on parameter servers, trained on batches the program
// makes itself. The same program runs embedded (every rank a thread) or one stage per process:
//
//   build/bin/example_own_batches --steps 40
//   build/bin/example_own_batches --steps 40 --ps 2          # the table on 2 servers (threads)
//   build/bin/pipewright launch --nproc-per-node 2 -- build/bin/example_own_batches --steps 40
//   export PW_JOB_TOKEN=$(openssl rand -hex 16)                # 16 characters at least
//   build/bin/pipewright ps serve --bind 127.0.0.1:7000 &     # a server of its own
//   build/bin/pipewright launch --nproc-per-node 2 -- build/bin/example_own_batches \
//       --steps 40 --ps-servers 127.0.0.1:7000
//
// Each process makes the same global batch and calls step() with it; the engine hands the first
// stage the ids and the last stage the labels. --losses FILE writes the step losses as JSON.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <pipewright/pipewright.h>

namespace {

constexpr int kBag = 4;                 // ids per sample
constexpr std::int64_t kRows = 1000;    // the table's rows (ids 0..999)

// Ids -> one pooled embedding -> a two-layer classifier; two stages, split at fc1.
pw::partition::ModelDescription click_model(pw::layers::TablePlacement placement) {
  namespace L = pw::layers;
  pw::partition::ModelDescription m;
  m.name = "own-batches";
  m.sample_shape = {1, 1, kBag};   // the data set's C x H x W; flattened to the bag's ids
  m.num_classes = 2;
  m.layers = {L::flatten("ids"), L::embedding_bag("emb", kRows, 16, {kBag, L::BagMode::Sum, placement}),
              L::linear("fc1", 16, 32), L::relu("relu"), L::linear("fc2", 32, 2)};
  m.split_points = pw::partition::split_before(m, {"fc1"});
  return m;
}

// Global batch `step`: ids drawn from the step's seed; a sample is a click when most of its ids
// lie in the table's lower half. Every process makes the same batch.
struct Batch {
  std::vector<float> ids;
  std::vector<std::int64_t> labels;
};

Batch make_batch(std::int64_t step, std::int64_t samples) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(1000 + step));
  std::uniform_int_distribution<std::int64_t> id(0, kRows - 1);
  Batch b;
  for (std::int64_t i = 0; i < samples; ++i) {
    int low = 0;
    for (int k = 0; k < kBag; ++k) {
      const auto v = id(rng);
      low += v < kRows / 2 ? 1 : 0;
      b.ids.push_back(static_cast<float>(v));
    }
    b.labels.push_back(2 * low > kBag ? 1 : 0);
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t steps = 40;
  int servers = 0;
  std::string server_addresses, losses_path;
  CLI::App app{"a click model trained on the program's own batches, a step at a time"};
  app.add_option("--steps", steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--ps", servers, "parameter servers to start as threads of this process");
  app.add_option("--ps-servers", server_addresses, "HOST:PORT,... of running servers (pipewright ps serve)");
  app.add_option("--losses", losses_path, "write the step losses here (JSON)");
  CLI11_PARSE(app, argc, argv);

  const bool on_servers = servers > 0 || !server_addresses.empty();
  pw::train::JobConfig job;
  job.program_model = click_model(on_servers ? pw::layers::TablePlacement::ParameterServers
                                             : pw::layers::TablePlacement::Local);
  job.data.dataset = "synthetic";   // only its sample shape is used: the batches are ours
  job.data.synthetic_shape = {1, 1, kBag};
  job.data.batch_size = 32;
  job.pipeline.micro_batches = 2;
  job.optimizer.kind = pw::models::OptimizerKind::Sgd;
  job.optimizer.lr = 0.1;
  job.ps.servers = servers;
  job.ps.addresses = server_addresses;
  // Servers at given addresses admit the job by the token they were started with.
  if (const char* token = std::getenv("PW_JOB_TOKEN")) job.ps.token = token;
  job.seed = 5;
  job.resources.threads = 1;
  try {
    pw::train::Job trainer(job);
    std::vector<double> losses;
    for (std::int64_t s = 0; s < steps; ++s) {
      const auto batch = make_batch(s, job.data.batch_size);
      const auto out = trainer.step({job.data.batch_size, batch.ids, batch.labels});
      losses.push_back(out.loss);
      if (trainer.is_primary() && (s + 1) % 10 == 0)
        std::printf("step %lld: loss %.4f, accuracy %.3f\n", static_cast<long long>(s + 1), out.loss,
                    static_cast<double>(out.correct) / static_cast<double>(out.samples));
    }
    trainer.finish();
    if (trainer.is_primary() && !losses_path.empty()) {
      std::ofstream out(losses_path);
      out.precision(17);
      out << "[";
      for (std::size_t i = 0; i < losses.size(); ++i) out << (i ? ", " : "") << losses[i];
      out << "]\n";
    }
    return 0;
  } catch (const pw::InputError& e) {
    std::fprintf(stderr, "example_own_batches: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_own_batches: error: %s\n", e.what());
    return 1;
  }
}
