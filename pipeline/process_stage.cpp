#include "pipeline/process_stage.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/clock.h"
#include "kernels/runtime.h"
#include "models/loss.h"
#include "models/metrics.h"
#include "pipeline/error_context.h"
#include "pipeline/micro_batch.h"

namespace pw::pipeline {

namespace {

// Control messages (Tag::micro_batch) between the ranks of one job.
// Weights go as kFirstWeight + i; the scores' id lies far above any weight count.
enum ControlMessage : int { kStepFigures = 0, kEvalFigures = 1, kWeightNames = 2, kFirstWeight = 3, kEvalScores = 1 << 30 };

kernels::Tensor doubles_tensor(const std::vector<double>& values) {
  return kernels::Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())}, kernels::Device::cpu(0));
}

std::vector<double> tensor_doubles(const kernels::Tensor& t, std::size_t expected, const std::string& what) {
  PW_CHECK(t.dtype() == kernels::DType::F64 && static_cast<std::size_t>(t.numel()) == expected,
           what << ": expected " << expected << " F64 values, got " << t.describe());
  return t.to_double_vector();
}

}  // namespace

ProcessStage::ProcessStage(const partition::ModelDescription& model, const partition::Partition& partition,
                           PipelineOptions options, rpc::Transport& transport, rpc::Transport& control,
                           int replicas)
    : options_(std::move(options)), transport_(transport), control_(control), replicas_(replicas) {
  validate(options_.spec);
  const int P = options_.spec.stages;
  const int V = options_.spec.chunks;
  const int s = transport_.rank();
  PW_INPUT_CHECK(transport_.world_size() == P, "a pipeline of " << transport_.world_size() << " ranks runs " << P
                                                                << " stages here; give one rank per stage");
  PW_INPUT_CHECK(replicas_ >= 1 && control_.world_size() == P * replicas_,
                 "a job of " << control_.world_size() << " ranks cannot hold " << P << " stages x " << replicas_
                             << " replicas");
  PW_INPUT_CHECK(static_cast<int>(partition.size()) == P * V,
                 "the split has " << partition.size() << " parts but " << P << " stages x " << V << " chunks need "
                                  << P * V);
  partition::check_partition(partition, model.layer_count());
  PW_INPUT_CHECK(options_.devices.size() == 1, "a process stage runs on one device, got " << options_.devices.size());
  PW_INPUT_CHECK(model.tied.empty(), "model " << model.name << " ties weights across stages, which multi-process "
                                              "pipelines do not support yet; run it embedded (one process)");
  std::vector<std::unique_ptr<models::Sequential>> chunks;
  for (int c = 0; c < V; ++c) {
    models::LayerDeviceScope on_device(options_.devices.front());
    chunks.push_back(partition::build_stage(model, partition[static_cast<std::size_t>(c * P + s)], options_.seed));
  }
  StageConfig config;
  config.spec = options_.spec;
  config.stage = s;
  config.device = options_.devices.front();
  config.recompute = options_.recompute;
  config.timeout = options_.timeout;
  config.replica = control_.rank() / P;
  config.objective = options_.objective;
  executor_ = std::make_unique<StageExecutor>(config, std::move(chunks), options_.optimizer, transport_);
}

std::vector<std::vector<double>> ProcessStage::exchange(const std::vector<double>& values, int message,
                                                        std::int64_t round) {
  const int world = control_.world_size();
  const int self = control_.rank();
  const rpc::Tag tag{round, message, rpc::PayloadKind::Control, 0};
  const auto payload = doubles_tensor(values);
  std::vector<std::vector<double>> all(static_cast<std::size_t>(world));
  int peer = 0;
  try {
    for (peer = 0; peer < world; ++peer)
      if (peer != self) control_.send(peer, tag, payload, deadline());
    for (peer = 0; peer < world; ++peer)
      all[static_cast<std::size_t>(peer)] =
          peer == self ? values
                          : tensor_doubles(control_.recv(peer, tag, deadline()), values.size(),
                                           "figures from rank " + std::to_string(peer));
  } catch (...) {
    std::ostringstream context;
    context << "stage " << stage() << " (" << options_.devices.front().str() << "), step " << round
            << ", exchanging " << (message == kStepFigures ? "the step's" : "the evaluation's") << " figures with rank "
            << peer << ": ";
    rethrow_with_context(context.str());
  }
  return all;
}

PipelineStepResult ProcessStage::train_step(const models::data::Batch& global) {
  // This replica's share of the global batch: the same rows the embedded hybrid trainer gives it.
  const auto images = replicas_ > 1 ? split_batch(global.images, replicas_)[static_cast<std::size_t>(replica())]
                                    : global.images;
  const auto labels = replicas_ > 1 ? split_batch(global.labels, replicas_)[static_cast<std::size_t>(replica())]
                                    : global.labels;
  MicroBatchInputs inputs{split_batch(images, options_.spec.micro_batches),
                          split_batch(labels, options_.spec.micro_batches)};
  const auto start = Clock::now();
  const std::int64_t step = step_++;
  StageStepResult mine = executor_->run_step(step, inputs);
  const auto peak = kernels::DeviceRuntime::get(options_.devices.front()).allocator().stats().peak_in_use;
  const auto all = exchange({mine.loss_sum, static_cast<double>(mine.correct), static_cast<double>(mine.samples),
                             mine.busy_seconds, static_cast<double>(peak)},
                            kStepFigures, step);
  PipelineStepResult r;
  r.wall_seconds = seconds_since(start);
  double loss_sum = 0.0;
  const int P = stages();
  stage_peak_memory_.assign(static_cast<std::size_t>(P), 0);
  r.stage_busy_seconds.assign(static_cast<std::size_t>(P), 0.0);
  for (std::size_t rank = 0; rank < all.size(); ++rank) {
    const auto& f = all[rank];
    const auto s = rank % static_cast<std::size_t>(P);
    loss_sum += f[0];
    r.correct += static_cast<std::int64_t>(f[1]);
    r.samples += static_cast<std::int64_t>(f[2]);
    r.stage_busy_seconds[s] += f[3] / static_cast<double>(replicas_);   // mean over the stage's replicas
    stage_peak_memory_[s] = std::max(stage_peak_memory_[s], static_cast<std::int64_t>(f[4]));
  }
  r.loss = r.samples > 0 ? loss_sum / static_cast<double>(r.samples) : 0.0;
  r.stages.push_back(std::move(mine));
  return r;
}

models::EvalResult ProcessStage::evaluate(models::data::DataLoader& loader, std::int64_t max_batches) {
  const int P = stages();
  const int V = options_.spec.chunks;
  const int last = P * V - 1;
  const std::int64_t round = evaluations_++;
  const auto device = options_.devices.front();
  // Every rank walks the same test batches; activations travel stage to stage as in training.
  double loss_sum = 0.0, correct = 0.0, samples = 0.0;
  const bool scored = options_.objective == models::Objective::BinaryCrossEntropy;
  std::vector<double> scores, score_labels;   // binary objective: for the AUC, gathered at rank 0
  loader.start_epoch(0);
  int b = 0;
  // The replicas take turns with the batches (replica r: batches r, r + R, ...) and add up.
  while (true) {
    auto batch = loader.next();
    if (!batch) break;
    if (max_batches >= 0 && b >= max_batches) break;
    if (b % replicas_ != replica()) {
      ++b;
      continue;
    }
    for (int c = 0; c < V; ++c) {
      const int v = c * P + stage();
      const rpc::Tag in_tag{round, b, rpc::PayloadKind::Evaluation, v};
      kernels::Tensor x = v == 0 ? batch->images.to(device) : transport_.recv((v - 1) % P, in_tag, deadline()).to(device);
      kernels::Tensor y = executor_->chunk(c).forward(x, models::Mode::Eval).y;
      if (v == last) {
        const auto labels = batch->labels.to(y.device());
        const auto loss = models::compute_loss(options_.objective, y, labels, 1.0);
        loss_sum += loss.loss * static_cast<double>(labels.numel());
        correct += static_cast<double>(loss.correct);
        samples += static_cast<double>(labels.numel());
        if (scored) {
          const auto z = y.to_double_vector();
          scores.insert(scores.end(), z.begin(), z.end());
          for (auto label : labels.to_int_vector()) score_labels.push_back(static_cast<double>(label));
        }
      } else {
        transport_.send((v + 1) % P, rpc::Tag{round, b, rpc::PayloadKind::Evaluation, v + 1}, y, deadline());
      }
    }
    ++b;
  }
  const auto all = exchange({loss_sum, correct, samples}, kEvalFigures, round);
  double f[3] = {0.0, 0.0, 0.0};
  for (std::size_t rank = 0; rank < all.size(); ++rank)
    if (static_cast<int>(rank) % P == last % P)   // the last stage of each replica
      for (int i = 0; i < 3; ++i) f[i] += all[rank][static_cast<std::size_t>(i)];
  models::EvalResult r;
  r.samples = static_cast<std::int64_t>(f[2]);
  if (r.samples > 0) {
    r.loss = f[0] / f[2];
    r.accuracy = f[1] / f[2];
  }
  if (scored) r.auc = gather_auc(all, scores, score_labels, round);
  return r;
}

// The last stage of every replica sends rank 0 its scores and labels; rank 0 ranks them all
// (-1 elsewhere, and when the test set holds one class only).
double ProcessStage::gather_auc(const std::vector<std::vector<double>>& figures, std::vector<double> scores,
                                const std::vector<double>& labels, std::int64_t round) {
  const int P = stages();
  const int last = (P * options_.spec.chunks - 1) % P;
  const rpc::Tag tag{round, kEvalScores, rpc::PayloadKind::Control, 0};
  const int self = control_.rank();
  const bool is_last = stage() == last;
  if (self != 0) {
    if (is_last) {
      std::vector<double> both = scores;
      both.insert(both.end(), labels.begin(), labels.end());
      control_.send(0, tag, doubles_tensor(both), deadline());
    }
    return -1.0;
  }
  std::vector<std::int64_t> all_labels;
  if (is_last) all_labels.assign(labels.begin(), labels.end());
  else scores.clear();
  for (std::size_t rank = 1; rank < figures.size(); ++rank) {
    if (static_cast<int>(rank) % P != last) continue;
    const auto n = static_cast<std::size_t>(figures[rank][2]);
    const auto both = tensor_doubles(control_.recv(static_cast<int>(rank), tag, deadline()), 2 * n,
                                     "evaluation scores from rank " + std::to_string(rank));
    scores.insert(scores.end(), both.begin(), both.begin() + static_cast<std::ptrdiff_t>(n));
    for (std::size_t i = n; i < 2 * n; ++i) all_labels.push_back(static_cast<std::int64_t>(both[i]));
  }
  const auto positives = std::count(all_labels.begin(), all_labels.end(), std::int64_t{1});
  if (positives == 0 || positives == static_cast<std::int64_t>(all_labels.size())) return -1.0;
  return models::roc_auc(scores, all_labels);
}

std::vector<models::Layer*> ProcessStage::layers() {
  std::vector<models::Layer*> out;
  for (int c = 0; c < executor_->chunk_count(); ++c) out.push_back(&executor_->chunk(c));
  return out;
}

kernels::NamedTensors ProcessStage::gather_weights() {
  const std::int64_t round = gathers_++;
  if (replica() != 0) return {};   // replicas hold the same weights as replica 0
  std::vector<std::pair<std::string, kernels::Tensor>> mine;
  for (auto* layer : layers()) {
    for (auto& [name, p] : layer->named_parameters()) mine.emplace_back(name, p->value);
    for (auto& [name, b] : layer->named_buffers()) mine.emplace_back(name, b->value);
  }
  if (stage() != 0) {
    // Names first (one per line, as bytes), then the tensors in the same order.
    std::string names;
    for (const auto& [name, t] : mine) names += name + "\n";
    auto text = kernels::Tensor::empty({static_cast<std::int64_t>(names.size())}, kernels::DType::U8,
                                       kernels::Device::cpu(0));
    std::memcpy(text.raw(), names.data(), names.size());
    control_.send(0, rpc::Tag{round, kWeightNames, rpc::PayloadKind::Control, 0}, text, deadline());
    for (std::size_t i = 0; i < mine.size(); ++i)
      control_.send(0, rpc::Tag{round, kFirstWeight + static_cast<int>(i), rpc::PayloadKind::Control, 0},
                      mine[i].second, deadline());
    return {};
  }
  kernels::NamedTensors all;
  for (auto& [name, t] : mine) all.emplace(name, t.to(kernels::Device::cpu(0)));
  for (int r = 1; r < stages(); ++r) {
    const auto text = control_.recv(r, rpc::Tag{round, kWeightNames, rpc::PayloadKind::Control, 0}, deadline());
    PW_CHECK(text.dtype() == kernels::DType::U8, "weight names from rank " << r << " are " << text.describe());
    std::istringstream names(std::string(static_cast<const char*>(text.to(kernels::Device::cpu(0)).raw()), text.nbytes()));
    std::string name;
    for (int i = 0; std::getline(names, name); ++i) {
      auto t = control_.recv(r, rpc::Tag{round, kFirstWeight + i, rpc::PayloadKind::Control, 0}, deadline());
      PW_CHECK(all.emplace(name, std::move(t)).second, "rank " << r << " sent weight '" << name << "' twice");
    }
  }
  return all;
}

}  // namespace pw::pipeline
