#include "pipeline/pipeline_trainer.h"

#include <future>

#include "core/clock.h"
#include "kernels/runtime.h"
#include "pipeline/micro_batch.h"
#include "rpc/job_token.h"

namespace pw::pipeline {
namespace {

// Each tied weight's members, looked up by name in the stages' chunks; members start equal to the
// first one.
std::vector<std::vector<TiedGroup>> tied_groups(const partition::ModelDescription& model,
                                                std::vector<std::vector<std::unique_ptr<models::Sequential>>>& chunks) {
  const std::size_t stages = chunks.size();
  std::vector<std::vector<TiedGroup>> per_stage(stages, std::vector<TiedGroup>(model.tied.size()));
  for (std::size_t g = 0; g < model.tied.size(); ++g) {
    const auto& tied = model.tied[g];
    models::Parameter* first = nullptr;
    std::vector<int> owners;
    for (const auto& name : tied.parameters) {
      models::Parameter* found = nullptr;
      for (std::size_t s = 0; s < stages && found == nullptr; ++s) {
        for (auto& chunk : chunks[s]) {
          for (auto& [pname, p] : chunk->named_parameters())
            if (pname == name) found = p;
          if (found != nullptr) {
            per_stage[s][g].local.push_back(found);
            owners.push_back(static_cast<int>(s));
            break;
          }
        }
      }
      PW_INPUT_CHECK(found != nullptr, "tied weight '" << tied.name << "': no stage has parameter '" << name << "'");
      if (first == nullptr) first = found;
      else found->value.copy_from(first->value);
    }
    std::sort(owners.begin(), owners.end());
    owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
    for (std::size_t s = 0; s < stages; ++s) per_stage[s][g].owner_stages = owners;
  }
  return per_stage;
}

}  // namespace

PipelineTrainer::PipelineTrainer(const partition::ModelDescription& model, const partition::Partition& partition,
                                 PipelineOptions options)
    : options_(std::move(options)), hub_(options_.spec.stages) {
  validate(options_.spec);
  const int P = options_.spec.stages;
  const int V = options_.spec.chunks;
  PW_INPUT_CHECK(static_cast<int>(partition.size()) == P * V,
                 "the split has " << partition.size() << " parts but " << P << " stages x " << V
                                  << " chunks need " << P * V);
  partition::check_partition(partition, model.layer_count());
  PW_INPUT_CHECK(static_cast<int>(options_.devices.size()) == P,
                 options_.devices.size() << " devices for " << P << " stages; give one device per stage");
  partition::check_tied(model);

  std::vector<std::vector<std::unique_ptr<models::Sequential>>> chunks(static_cast<std::size_t>(P));
  for (int s = 0; s < P; ++s) {
    for (int c = 0; c < V; ++c) {
      const auto range = partition[static_cast<std::size_t>(c * P + s)];
      models::LayerDeviceScope on_stage_device(options_.devices[static_cast<std::size_t>(s)]);
      chunks[static_cast<std::size_t>(s)].push_back(partition::build_stage(model, range, options_.seed));
    }
  }
  auto tied = tied_groups(model, chunks);
  if (options_.links == StageLinks::Thrift) {
    const std::string token = rpc::make_job_token();
    const std::vector<std::string> loopback(static_cast<std::size_t>(P), "127.0.0.1:0");
    for (int s = 0; s < P; ++s) transports_.push_back(std::make_unique<rpc::ThriftTransport>(s, P, loopback, token));
    for (int s = 0; s < P; ++s)
      for (int peer = 0; peer < P; ++peer)
        static_cast<rpc::ThriftTransport&>(*transports_[static_cast<std::size_t>(s)])
            .set_peer_address(peer, static_cast<rpc::ThriftTransport&>(*transports_[static_cast<std::size_t>(peer)]).address());
  } else {
    for (int s = 0; s < P; ++s) transports_.push_back(hub_.endpoint(s));
  }
  for (int s = 0; s < P; ++s) {
    StageConfig config;
    config.spec = options_.spec;
    config.stage = s;
    config.device = options_.devices[static_cast<std::size_t>(s)];
    config.recompute = options_.recompute;
    config.timeout = options_.timeout;
    config.replica = options_.replica;
    config.objective = options_.objective;
    const auto su = static_cast<std::size_t>(s);
    executors_.push_back(std::make_unique<StageExecutor>(config, std::move(chunks[su]), options_.optimizer,
                                                         *transports_[su], std::move(tied[su])));
    workers_.push_back(std::make_unique<StageWorker>());
  }
}

void PipelineTrainer::abort_all(const std::string& reason) {
  if (options_.links == StageLinks::InProcess) hub_.abort(reason);
  else
    for (auto& t : transports_) t->abort(reason);
}

void PipelineTrainer::reset_all() {
  if (options_.links == StageLinks::InProcess) hub_.reset();
  else
    for (auto& t : transports_) static_cast<rpc::ThriftTransport&>(*t).reset();
}

PipelineTrainer::~PipelineTrainer() {
  abort_all("the pipeline is shutting down");
  workers_.clear();   // joins the stage threads before the executors go
}

PipelineStepResult PipelineTrainer::train_step(const models::data::Batch& batch) {
  const int P = options_.spec.stages;
  MicroBatchInputs inputs{split_batch(batch.images, options_.spec.micro_batches),
                          split_batch(batch.labels, options_.spec.micro_batches)};
  // Every stage thread is idle here: clear what a failed step may have left behind.
  reset_all();
  const auto start = Clock::now();
  const std::int64_t step = step_++;
  std::vector<StageStepResult> results(static_cast<std::size_t>(P));
  std::vector<std::future<void>> done;
  for (int s = 0; s < P; ++s) {
    const auto su = static_cast<std::size_t>(s);
    done.push_back(workers_[su]->submit([this, su, step, &inputs, &results] {
      try {
        results[su] = executors_[su]->run_step(step, inputs);
      } catch (const std::exception& e) {
        abort_all(std::string("stopped because another stage failed: ") + e.what());
        throw;
      } catch (...) {
        abort_all("stopped because another stage failed");
        throw;
      }
    }));
  }
  // Report the root cause: the first failure that is not another stage's abort.
  std::exception_ptr root, any;
  for (auto& f : done) {
    try {
      f.get();
    } catch (const rpc::AbortedError&) {
      if (!any) any = std::current_exception();
    } catch (...) {
      if (!root) root = std::current_exception();
    }
  }
  if (root) std::rethrow_exception(root);
  if (any) std::rethrow_exception(any);

  PipelineStepResult r;
  r.wall_seconds = seconds_since(start);
  double loss_sum = 0.0;
  for (const auto& s : results) {
    loss_sum += s.loss_sum;
    r.correct += s.correct;
    r.samples += s.samples;
    r.stage_busy_seconds.push_back(s.busy_seconds);
  }
  r.stages = std::move(results);
  r.loss = r.samples > 0 ? loss_sum / static_cast<double>(r.samples) : 0.0;
  return r;
}

models::EvalResult PipelineTrainer::evaluate(models::data::DataLoader& loader, std::int64_t max_batches) {
  const int P = options_.spec.stages;
  const int V = options_.spec.chunks;
  // Evaluation runs the chunks in model order on the calling thread; no schedule is needed.
  return models::evaluate_classifier(
      loader, max_batches,
      [&](const kernels::Tensor& images) {
    kernels::Tensor x = images;
    for (int v = 0; v < P * V; ++v) {
      auto& exec = *executors_[static_cast<std::size_t>(v % P)];
      x = exec.chunk(v / P).forward(x.to(exec.config().device), models::Mode::Eval).y;
    }
    return x;
      },
      options_.objective);
}

std::vector<std::int64_t> PipelineTrainer::stage_peak_memory() const {
  std::vector<std::int64_t> out;
  for (const auto& d : options_.devices) out.push_back(kernels::DeviceRuntime::get(d).allocator().stats().peak_in_use);
  return out;
}

std::vector<models::Layer*> PipelineTrainer::stage_layers(int stage) {
  auto& e = *executors_.at(static_cast<std::size_t>(stage));
  std::vector<models::Layer*> out;
  for (int c = 0; c < e.chunk_count(); ++c) out.push_back(&e.chunk(c));
  return out;
}

std::vector<std::pair<std::string, models::Parameter*>> PipelineTrainer::named_parameters() {
  std::vector<std::pair<std::string, models::Parameter*>> out;
  for (auto& e : executors_)
    for (int c = 0; c < e->chunk_count(); ++c) {
      auto part = e->chunk(c).named_parameters();
      out.insert(out.end(), part.begin(), part.end());
    }
  return out;
}

}  // namespace pw::pipeline
