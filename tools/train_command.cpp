#include "tools/train_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/log.h"
#include "core/trace.h"
#include "core/units.h"
#include "kernels/runtime.h"
#include "kernels/stream.h"
#include "models/checkpoint.h"
#include "models/data/dataset.h"
#include "models/trainer.h"
#include "tools/train_backend.h"
#include "models/zoo/model_spec.h"
#include "tools/progress.h"
#include "tools/ps_setup.h"

namespace pw::tools {
namespace {

// Fails before training when an output file could not be written later.
void check_writable(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const auto parent = std::filesystem::absolute(path).parent_path();
  PW_INPUT_CHECK(std::filesystem::is_directory(parent),
                 flag << " " << path << ": folder " << parent.string() << " does not exist");
  PW_INPUT_CHECK(!std::filesystem::is_directory(path), flag << " " << path << " is a folder; give a file name");
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    PW_INPUT_CHECK(out.good(), "cannot write '" << tmp << "'");
    out << j.dump(2) << "\n";
    PW_INPUT_CHECK(out.good(), "failed writing '" << tmp << "'");
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) {
    std::filesystem::remove(tmp, error);
    throw InputError("cannot write '" + path + "': " + error.message());
  }
}

struct DataSets {
  std::unique_ptr<models::data::Dataset> train, test;
};

models::data::ClickFeatures click_features(const TrainOptions& o) {
  models::data::ClickFeatures clicks;
  for (auto rows : o.embedding_rows)
    PW_INPUT_CHECK(rows >= 1 && rows <= models::data::kMaxPackedId,
                   "--embedding-rows " << rows << ": expected 1 to " << models::data::kMaxPackedId
                                       << " rows per table (ids travel as exact F32 integers)");
  if (!o.embedding_rows.empty()) clicks.table_sizes = o.embedding_rows;
  models::data::check_click_features(clicks);
  return clicks;
}

DataSets open_data(const TrainOptions& o) {
  models::data::DatasetOptions d;
  d.fashion_mnist_dir = o.data_dir;
  d.seed = o.seed;
  d.clicks = click_features(o);
  if (o.dataset == "synthetic") {
    PW_INPUT_CHECK(o.synthetic_size >= 1, "--synthetic-size must be >= 1, got " << o.synthetic_size);
    d.synthetic_shape = models::data::parse_sample_shape(o.synthetic_shape);
    d.synthetic_size = o.synthetic_size;
  }
  return {models::data::open_dataset(o.dataset, models::data::Split::Train, d),
          models::data::open_dataset(o.dataset, models::data::Split::Test, d)};
}

// "A:B" -> [A, B); every step when empty.
std::pair<std::int64_t, std::int64_t> parse_trace_steps(const std::string& text) {
  if (text.empty()) return {0, INT64_MAX};
  const auto colon = text.find(':');
  std::int64_t a = -1, b = -1;
  try {
    PW_INPUT_CHECK(colon != std::string::npos, "");
    std::size_t used = 0;
    a = std::stoll(text.substr(0, colon), &used);
    PW_INPUT_CHECK(used == colon, "");
    b = std::stoll(text.substr(colon + 1), &used);
    PW_INPUT_CHECK(used == text.size() - colon - 1, "");
  } catch (const std::exception&) {
    a = b = -1;
  }
  PW_INPUT_CHECK(a >= 0 && b > a, "--trace-steps '" << text << "': expected A:B with 0 <= A < B, e.g. 10:20");
  return {a, b};
}

// Every N steps: how busy each stage was since the last line, and the resulting bubble.
class UtilisationLine {
 public:
  explicit UtilisationLine(std::int64_t every) : every_(every) {}
  void add(std::int64_t step, double seconds, const std::vector<double>& busy) {
    if (busy.size() < 2) return;
    busy_.resize(busy.size(), 0.0);
    for (std::size_t i = 0; i < busy.size(); ++i) busy_[i] += busy[i];
    seconds_ += seconds;
    if (first_ < 0) first_ = step;
    if (step % every_ != 0) return;
    std::string line = "utilisation steps " + std::to_string(first_) + "-" + std::to_string(step) + ": stage busy";
    double mean = 0.0;
    for (double b : busy_) {
      const double f = seconds_ > 0 ? b / seconds_ : 0.0;
      mean += f / static_cast<double>(busy_.size());
      char cell[16];
      std::snprintf(cell, sizeof cell, " %.0f%%", 100.0 * f);
      line += cell;
    }
    char tail[64];
    std::snprintf(tail, sizeof tail, "; bubble %.0f%%", 100.0 * (1.0 - mean));
    std::fprintf(stderr, "%s%s\n", line.c_str(), tail);
    busy_.assign(busy_.size(), 0.0);
    seconds_ = 0.0;
    first_ = -1;
  }

 private:
  std::int64_t every_;
  std::vector<double> busy_;
  double seconds_ = 0.0;
  std::int64_t first_ = -1;
};

struct Throughput {
  double median_step_ms = 0.0;
  double samples_per_second = 0.0;   // batch size over the median step time
};

// Steps after the warm-up (first-use costs: primitive creation, allocator growth) are timed.
Throughput steady_throughput(std::vector<double> seconds, std::int64_t warmup, std::int64_t batch) {
  if (static_cast<std::int64_t>(seconds.size()) > warmup) seconds.erase(seconds.begin(), seconds.begin() + warmup);
  if (seconds.empty()) return {};
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  return {median * 1e3, median > 0 ? static_cast<double>(batch) / median : 0.0};
}

}  // namespace

void add_train_command(CLI::App& app, TrainOptions& o) {
  auto* cmd = app.add_subcommand("train", "train a model on one device or as a pipeline of stages");
  cmd->add_option("--model", o.model, "seed-cnn, resnet18/34/50/101/152, vgg16, dlrm")->capture_default_str();
  cmd->add_option("--dataset", o.dataset, "fashion-mnist, synthetic or synthetic-clicks (for dlrm)")->capture_default_str();
  cmd->add_option("--data-dir", o.data_dir, "folder with the Fashion-MNIST IDX files (default $PW_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)");
  cmd->add_option("--synthetic-shape", o.synthetic_shape, "CxHxW of synthetic samples")->capture_default_str();
  cmd->add_option("--synthetic-size", o.synthetic_size, "training samples of the synthetic data set")->capture_default_str();
  cmd->add_option("--width", o.width, "ResNet base width / VGG width scale (64 = standard)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--epochs", o.epochs, "passes over the training set")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--steps", o.steps, "optimizer steps (overrides --epochs)")->check(CLI::PositiveNumber);
  cmd->add_option("--batch-size", o.batch_size, "mini-batch size")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--lr", o.lr, "learning rate (default: adam 0.001, sgd 0.01, adagrad 0.01)")->check(CLI::PositiveNumber);
  cmd->add_option("--optimizer", o.optimizer, "sgd, adam or adagrad")->capture_default_str();
  cmd->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--weight-decay", o.weight_decay, "L2 weight decay")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", o.threads, "threads of the CPU device (default: all)")->check(CLI::PositiveNumber);
  cmd->add_option("--device", o.device, "cpu:N or cuda:N")->capture_default_str();
  cmd->add_option("--device-memory", o.device_memory, "memory cap of the device, e.g. 512MiB");
  cmd->add_option("--seed", o.seed, "seed of weights, shuffling and dropout")->capture_default_str();
  cmd->add_option("--summary", o.summary_path, "write a JSON summary here");
  cmd->add_option("--save", o.save_path, "save the trained weights (safetensors)");
  cmd->add_option("--load", o.load_path, "start from these weights (safetensors)");
  cmd->add_option("--log-every", o.log_every, "progress line every N steps when output is not a terminal")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup-steps", o.warmup_steps, "steps left out of the steady-state throughput figures")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--stages", o.stages, "pipeline stages, one thread and device each (default: from --split, else 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--micro-batches", o.micro_batches, "micro-batches per mini-batch (default: one per stage)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--schedule", o.schedule, "gpipe, 1f1b, interleaved or zb-h1")->capture_default_str();
  cmd->add_option("--chunks", o.chunks, "model chunks per stage (interleaved)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--devices", o.devices, "one device per stage, e.g. cpu:0,cpu:1 (default cpu:0..P-1)");
  auto* split = cmd->add_option("--split", o.split, "first layer index of stages 1..P-1, e.g. 3,7,12");
  cmd->add_option("--partition", o.partition, "uniform, params or profile")->capture_default_str()->excludes(split);
  cmd->add_option("--recompute", o.recompute, "none, all or except-last")->capture_default_str();
  cmd->add_option("--stage-timeout", o.stage_timeout_seconds, "seconds a stage waits for a neighbour before failing")
      ->capture_default_str()->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--replicas", o.replicas,
                  "data-parallel replicas of the pipeline; --batch-size is the global batch, split evenly over them")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--bucket-size", o.bucket_size, "gradients are all-reduced in buckets of about this size")
      ->capture_default_str();
  cmd->add_option("--grad-compression", o.grad_compression, "none or fp16 (all-reduce gradients as fp16)")
      ->capture_default_str();
  cmd->add_option("--transport", o.transport,
                  "auto, inprocess, thrift or nccl (auto: in-process within one process, NCCL between GPUs of a "
                  "multi-process job, else Thrift)")
      ->capture_default_str();
  cmd->add_option("--heartbeat-timeout", o.heartbeat_timeout_seconds,
                  "multi-process jobs: seconds after which a silent rank ends the job (a killed rank ends it at once)")
      ->capture_default_str()->check(CLI::Range(0.5, 1e6));
  cmd->add_option("--startup-timeout", o.startup_timeout_seconds,
                  "multi-process jobs: seconds for every rank to reach the rendezvous")
      ->capture_default_str()->check(CLI::Range(0.1, 1e6));
  cmd->add_option("--trace", o.trace_path,
                  "write a Chrome trace (Perfetto, chrome://tracing; read by pipewright prof) of the steps; "
                  "multi-process jobs write FILE with .rankN before the extension")
      ->check([](const std::string& s) { return s.empty() ? std::string("--trace needs a file name") : std::string(); });
  cmd->add_option("--trace-steps", o.trace_steps, "trace only steps A to B-1, e.g. 10:20 (default: all; the trace "
                                                 "keeps the latest 262144 spans)");
  cmd->add_option("--embedding-rows", o.embedding_rows,
                  "dlrm: rows of each sparse feature's table, e.g. 10000000,10000000,10000000 (default 1000 each; "
                  "at most 2^24)")->delimiter(',');
  cmd->add_option("--embedding-dim", o.embedding_dim, "dlrm: width of the embedding rows")->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--ps", o.ps, "parameter servers holding the embedding tables (run in this process unless "
                                "started by pipewright launch --ps or given with --ps-servers)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--ps-servers", o.ps_servers, "HOST:PORT,... of running parameter servers (pipewright ps serve; "
                                                "the job token comes from PW_JOB_TOKEN)");
  cmd->add_option("--ps-mode", o.ps_mode, "sync, async or bounded (staleness --staleness)")->capture_default_str();
  cmd->add_option("--staleness", o.staleness, "bounded: a pull of step t waits until step t-s is applied; async "
                                              "and bounded: steps a cached row may be reused for")
      ->capture_default_str()->check(CLI::Range(0, 1000000));
  cmd->add_option("--ps-optimizer", o.ps_optimizer, "sparse optimizer on the servers: sgd, adagrad or adam "
                                                    "(default: --optimizer)");
  cmd->add_option("--ps-lr", o.ps_lr, "learning rate of the sparse optimizer (default: --lr)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--ps-cache-rows", o.ps_cache_rows, "embedding rows a worker caches between pulls (0: none)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--ps-dir", o.ps_dir, "with --ps: the servers keep their shards here and resume from them");
  cmd->add_option("--eval-batches", o.eval_batches, "evaluate on at most N test batches (default: all)");
  cmd->callback([&o] { std::exit(run_train(o)); });
}

int run_train(const TrainOptions& o) {
  using namespace pw::models;
  const auto device = kernels::Device::parse(o.device);
  if (device.is_cuda() && o.devices.empty()) {
    const int n = kernels::cuda_device_count();
    PW_INPUT_CHECK(device.index < n, "--device " << o.device << ": this machine has " << n << " CUDA device(s)"
                                                 << (n == 0 ? "; use --device cpu:0" : ""));
  }
  check_writable(o.summary_path, "--summary");
  check_writable(o.save_path, "--save");
  check_writable(o.trace_path, "--trace");
  const auto [trace_first, trace_last] = parse_trace_steps(o.trace_steps);
  if (!o.trace_path.empty()) {
    trace::Recorder::global().clear();
    trace::Recorder::global().enable(trace_first, trace_last);
  }
  OptimizerConfig oc;
  oc.kind = parse_optimizer_kind(o.optimizer);
  oc.lr = o.lr > 0 ? o.lr : (oc.kind == OptimizerKind::Adam ? 1e-3 : 1e-2);
  oc.momentum = o.momentum;
  oc.weight_decay = o.weight_decay;

  auto data = open_data(o);
  ModelOptions mo;
  mo.width = o.width;
  mo.sample_shape = data.train->sample_shape();
  mo.num_classes = data.train->num_classes();
  mo.seed = o.seed;
  mo.clicks = click_features(o);
  mo.embedding_dim = o.embedding_dim;
  const auto launch = rpc::launch_env();
  // Servers embedded here live until the backend has gone (it holds clients of theirs).
  const auto parameter_servers = tools::ParameterServers::open(o, launch.has_value());
  if (parameter_servers) parameter_servers->plug_into(mo, o, o.model);
  const ModelSpec spec = make_model_spec(o.model, mo);
  const ModelStats stats = model_stats(spec);

  using data::DataLoader;
  DataLoader train_loader(*data.train, o.batch_size, data::Shuffle::Yes, o.seed, data::LastBatch::Drop);
  PW_INPUT_CHECK(train_loader.batches_per_epoch() > 0, "--batch-size " << o.batch_size << " is larger than the "
                                                                       << data.train->size() << " training samples");
  const std::int64_t total_steps = o.steps > 0 ? o.steps : o.epochs * train_loader.batches_per_epoch();
  auto backend = launch                ? make_process_backend(o, spec, oc, *launch)
                 : wants_pipeline(o) ? make_pipeline_backend(o, spec, oc)
                                     : make_single_device_backend(o, spec, oc);
  const bool primary = backend->is_primary();
  // An error below (a NaN loss, an unwritable output) still tells the other ranks of a job.
  struct AbandonOnError {
    TrainBackend& backend;
    int pending = std::uncaught_exceptions();
    ~AbandonOnError() {
      if (std::uncaught_exceptions() > pending)
        backend.abandon("it stopped with an error outside a training step (see its output)");
    }
  } abandon_on_error{*backend};

  std::fprintf(stderr, "pipewright train: %s (%lld parameters, %s activations/sample) on %s%s, %s, batch %lld, %lld steps\n",
               spec.name.c_str(), static_cast<long long>(stats.parameters),
               format_bytes(stats.activation_bytes_per_sample).c_str(), backend->describe().c_str(),
               parameter_servers ? (" with " + parameter_servers->describe()).c_str() : "",
               data.train->name().c_str(), static_cast<long long>(o.batch_size), static_cast<long long>(total_steps));

  backend->reset_peak_memory();
  const auto start = Clock::now();
  double train_seconds = 0.0;
  std::vector<double> loss_history, step_seconds, stage_busy;
  step_seconds.reserve(static_cast<std::size_t>(total_steps));
  loss_history.reserve(static_cast<std::size_t>(total_steps));
  std::int64_t samples = 0, correct = 0, step = 0, epoch = 0;
  ProgressLine progress(primary ? stderr : nullptr, total_steps, o.log_every);
  UtilisationLine utilisation(o.log_every);
  while (step < total_steps) {
    train_loader.start_epoch(epoch++);
    while (step < total_steps) {
      std::optional<models::data::Batch> batch;
      {
        trace::ScopedSpan loading(trace::SpanKind::DataLoad, -1, 0, step);
        batch = train_loader.next();
      }
      if (!batch) break;
      const auto t0 = Clock::now();
      const auto r = backend->step(*batch);
      const double dt = seconds_since(t0);
      train_seconds += dt;
      step_seconds.push_back(dt);
      ++step;
      samples += r.samples;
      correct += r.correct;
      loss_history.push_back(r.loss);
      stage_busy.resize(std::max(stage_busy.size(), r.stage_busy_seconds.size()), 0.0);
      for (std::size_t i = 0; i < r.stage_busy_seconds.size(); ++i) stage_busy[i] += r.stage_busy_seconds[i];
      PW_INPUT_CHECK(std::isfinite(r.loss), "loss became " << r.loss << " at step " << step << "; lower --lr");
      progress.update(step, r.loss, static_cast<double>(samples) / train_seconds, seconds_since(start));
      if (primary && !progress.in_place()) utilisation.add(step, dt, r.stage_busy_seconds);
    }
  }
  progress.finish();
  backend->synchronize();
  if (!o.trace_path.empty()) {
    trace::Recorder::global().disable();
    auto meta = backend->trace_meta();
    meta.dropped_spans = static_cast<std::int64_t>(trace::Recorder::global().dropped());
    const auto path = backend->trace_path(o.trace_path);
    write_chrome_trace(path, meta, trace::Recorder::global().snapshot());
    if (primary) std::fprintf(stderr, "trace: %s (read it with pipewright prof, or open it in Perfetto)\n", path.c_str());
  }

  // The weights are written before evaluation, so nothing that goes wrong there loses them.
  if (backend->saves(o.save_path)) backend->save(o.save_path, spec.name);   // gathers to rank 0 in a multi-process job
  // Evaluation batches are micro-batch sized: a stage holds no more at once than in training.
  DataLoader test_loader(*data.test, std::max<std::int64_t>(1, o.batch_size / backend->micro_batches()),
                         data::Shuffle::No, o.seed, data::LastBatch::Keep);
  const EvalResult eval = backend->evaluate(test_loader, o.eval_batches);
  const double wall = seconds_since(start);
  const double sps = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0.0;
  if (primary && eval.auc >= 0) std::fprintf(stderr, "test AUC %.4f\n", eval.auc);
  if (primary)
    std::fprintf(stderr, "test accuracy %.4f (loss %.4f, %lld samples); train %.1f samples/s; %s wall\n", eval.accuracy,
               eval.loss, static_cast<long long>(eval.samples), sps, format_duration(wall).c_str());

  if (!o.summary_path.empty() && primary) {
    nlohmann::json j;
    j["model"] = spec.name;
    j["params"] = stats.parameters;
    j["activation_bytes_per_sample"] = stats.activation_bytes_per_sample;
    j["dataset"] = data.train->name();
    j["optimizer"] = o.optimizer;
    j["lr"] = oc.lr;
    j["seed"] = o.seed;
    j["steps"] = step;
    j["batch_size"] = o.batch_size;
    j["samples_per_second"] = sps;
    const Throughput steady = steady_throughput(step_seconds, o.warmup_steps, o.batch_size);
    j["warmup_steps"] = o.warmup_steps;
    j["median_step_ms"] = steady.median_step_ms;
    j["steady_samples_per_second"] = steady.samples_per_second;
    j["final_loss"] = loss_history.empty() ? 0.0 : loss_history.back();
    j["loss_history"] = loss_history;
    j["train_accuracy"] = samples > 0 ? static_cast<double>(correct) / static_cast<double>(samples) : 0.0;
    j["test_accuracy"] = eval.accuracy;
    j["test_loss"] = eval.loss;
    if (spec.objective == models::Objective::BinaryCrossEntropy && eval.auc >= 0) j["test_auc"] = eval.auc;
    j["wall_seconds"] = wall;
    backend->add_summary(j, stage_busy, train_seconds);
    if (parameter_servers) parameter_servers->add_summary(j);
    write_json_file(o.summary_path, j);
  }
  backend->finish();
  return 0;
}

}  // namespace pw::tools
