#include "dataparallel/hybrid_trainer.h"

#include <exception>
#include <thread>

#include "core/clock.h"
#include "pipeline/micro_batch.h"

namespace pw::dp {

void run_per_rank(int ranks, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  // The root cause: the first failure that is not another member's abort.
  std::exception_ptr echo;
  for (auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const rpc::AbortedError&) {
      if (!echo) echo = e;
    } catch (...) {
      throw;
    }
  }
  if (echo) std::rethrow_exception(echo);
}

HybridTrainer::HybridTrainer(const partition::ModelDescription& model, const partition::Partition& partition,
                             pipeline::PipelineOptions options, int replicas, BucketOptions buckets)
    : topology_(options.spec.stages, replicas) {
  const int P = topology_.stages();
  const int R = topology_.replicas();
  PW_INPUT_CHECK(static_cast<int>(options.devices.size()) == P * R,
                 options.devices.size() << " devices for " << P << " stages x " << R << " replicas; give one per rank");
  for (int r = 0; r < R; ++r) {
    auto po = options;
    po.devices.assign(options.devices.begin() + r * P, options.devices.begin() + (r + 1) * P);
    po.replica = r;
    replicas_.push_back(std::make_unique<pipeline::PipelineTrainer>(model, partition, po));
  }
  if (R == 1) return;
  collectives_.resize(static_cast<std::size_t>(P * R));
  reducers_.resize(static_cast<std::size_t>(P * R));
  run_per_rank(P * R, [&](int rank) {
    const int s = topology_.stage_of(rank);
    const int r = topology_.replica_of(rank);
    auto& exec = replicas_[static_cast<std::size_t>(r)]->executor(s);
    const auto device = options.devices[static_cast<std::size_t>(rank)];
    const std::string group = "dp/stage" + std::to_string(s) + "/";
    std::shared_ptr<Collective> collective =
        device.is_cuda() ? std::shared_ptr<Collective>(make_nccl_collective(r, R, device, store_, group + "nccl", options.timeout))
                         : std::make_shared<GlooCollective>(r, R, store_, group, "127.0.0.1", options.timeout);
    // Replicas start from replica 0's weights whatever their seeds.
    for (auto* layer : replicas_[static_cast<std::size_t>(r)]->stage_layers(s)) {
      for (auto& [name, p] : layer->named_parameters()) collective->broadcast(p->value, 0);
      for (auto& [name, b] : layer->named_buffers()) collective->broadcast(b->value, 0);
    }
    auto reducer = std::make_unique<BucketReducer>(exec.parameters(), collective, buckets, TraceTrack{s, r});
    exec.set_gradient_sync(reducer.get());
    collectives_[static_cast<std::size_t>(rank)] = std::move(collective);
    reducers_[static_cast<std::size_t>(rank)] = std::move(reducer);
  });
}

HybridTrainer::~HybridTrainer() {
  for (auto& t : replicas_)
    for (int s = 0; s < topology_.stages(); ++s) t->executor(s).set_gradient_sync(nullptr);
}

pipeline::PipelineStepResult HybridTrainer::train_step(const models::data::Batch& batch) {
  const int R = topology_.replicas();
  if (R == 1) return replicas_.front()->train_step(batch);
  const auto images = pipeline::split_batch(batch.images, R);
  const auto labels = pipeline::split_batch(batch.labels, R);
  std::vector<pipeline::PipelineStepResult> results(static_cast<std::size_t>(R));
  const auto start = Clock::now();
  try {
    run_per_rank(R, [&](int r) {
      try {
        results[static_cast<std::size_t>(r)] = replicas_[static_cast<std::size_t>(r)]->train_step(
            models::data::Batch{images[static_cast<std::size_t>(r)], labels[static_cast<std::size_t>(r)]});
      } catch (const std::exception& e) {
        // The other replicas would wait for this one's gradients: stop them.
        const std::string reason = "replica " + std::to_string(r) + " failed: " + e.what();
        for (auto& reducer : reducers_) reducer->abort(reason);
        for (auto& t : replicas_) t->abort(reason);
        throw;
      }
    });
  } catch (...) {
    throw;
  }
  pipeline::PipelineStepResult out;
  out.wall_seconds = seconds_since(start);
  double loss_sum = 0.0;
  out.stage_busy_seconds.assign(static_cast<std::size_t>(topology_.stages()), 0.0);
  for (auto& r : results) {
    loss_sum += r.loss * static_cast<double>(r.samples);
    out.correct += r.correct;
    out.samples += r.samples;
    for (std::size_t s = 0; s < r.stage_busy_seconds.size(); ++s)
      out.stage_busy_seconds[s] += r.stage_busy_seconds[s] / static_cast<double>(R);
    for (auto& st : r.stages) out.stages.push_back(std::move(st));
  }
  out.loss = out.samples > 0 ? loss_sum / static_cast<double>(out.samples) : 0.0;
  return out;
}

models::EvalResult HybridTrainer::evaluate(models::data::DataLoader& loader, std::int64_t max_batches) {
  return replicas_.front()->evaluate(loader, max_batches);
}

std::vector<std::int64_t> HybridTrainer::stage_peak_memory() const {
  std::vector<std::int64_t> peaks;
  for (const auto& t : replicas_) {
    const auto p = t->stage_peak_memory();
    peaks.resize(p.size(), 0);
    for (std::size_t s = 0; s < p.size(); ++s) peaks[s] = std::max(peaks[s], p[s]);
  }
  return peaks;
}

std::vector<ReduceStats> HybridTrainer::reduce_stats() const {
  std::vector<ReduceStats> out;
  for (const auto& r : reducers_) out.push_back(r->stats());
  return out;
}

}  // namespace pw::dp
