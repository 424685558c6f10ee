// `pipewright train`: the flags become a JobConfig and the engine runs it (train/fit.h).
#include "tools/train_command.h"

#include <cstdio>
#include <sstream>

#include "core/units.h"
#include "kernels/ops/half_support.h"
#include "dataparallel/topology.h"
#include "models/data/dataset.h"
#include "models/zoo/model_spec.h"
#include "partition/model_description.h"
#include "train/fit.h"
#include "train/parameter_servers.h"
#include "tools/ps_bound_flags.h"

namespace pw::tools {
namespace {

std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

// A flag's text as the config's type, or InputError naming the flag.
template <typename Parse>
auto flag_value(const char* flag, const std::string& text, Parse parse) {
  try {
    return parse(text);
  } catch (const InputError& e) {
    throw InputError(std::string(flag) + ": " + e.what());
  }
}

std::int64_t bucket_bytes_of(const std::string& text) { return flag_value("--bucket-size", text, parse_bytes); }

// "4 stages (1f1b, 8 micro-batches, split 3,7,12) on cpu:0,..." for the start line.
std::string describe_job(const train::Engine& engine) {
  const auto& plan = engine.plan();
  const auto& s = plan.schedule;
  const auto& links = engine.links();
  std::ostringstream out;
  if (links.world_kind() == train::WorldKind::Processes) {
    out << "rank " << links.rank() << " of " << links.world_size() << " (" << links.launcher() << "): stage "
        << links.stage() << " of " << s.stages;
    if (plan.replicas() > 1) out << ", replica " << links.replica() << " of " << plan.replicas();
  } else {
    if (s.stages == 1 && plan.replicas() == 1 && s.micro_batches == 1) return engine.device().str();
    if (plan.replicas() > 1) out << plan.replicas() << " replicas x ";
    out << s.stages << " stages";
  }
  out << " (" << pipeline::schedule_kind_name(s.kind) << ", " << s.micro_batches << " micro-batches";
  if (s.chunks > 1) out << ", " << s.chunks << " chunks";
  if (engine.split().size() > 1) {
    out << ", split ";
    for (std::size_t i = 1; i < engine.split().size(); ++i) out << (i > 1 ? "," : "") << engine.split()[i].begin;
  }
  out << ") on ";
  if (links.world_kind() == train::WorldKind::Processes) {
    out << engine.device().str() << " over " << links.link_text();
  } else {
    for (int r = 0; r < links.world_size(); ++r)
      out << (r ? "," : "") << train::device_of_rank(plan.config, r, links.world_size(), train::WorldKind::Threads, r).str();
  }
  return out.str();
}

}  // namespace

train::JobConfig job_config_of(const TrainOptions& o) {
  train::JobConfig c;
  c.model.name = o.model;
  c.model.width = o.width;
  c.model.embedding_rows = o.embedding_rows;
  c.model.embedding_dim = o.embedding_dim;
  c.data.dataset = o.dataset;
  c.resources.data_dir = o.data_dir;
  c.data.synthetic_shape = models::data::parse_sample_shape(o.synthetic_shape);
  c.data.synthetic_size = o.synthetic_size;
  c.data.batch_size = o.batch_size;
  c.data.epochs = o.epochs;
  c.data.steps = o.steps;
  c.data.eval_batches = o.eval_batches;
  c.pipeline.stages = o.stages;
  c.pipeline.micro_batches = o.micro_batches;
  c.pipeline.schedule = parse_enum<pipeline::ScheduleKind>(o.schedule);
  c.pipeline.chunks = o.chunks;
  if (!o.split.empty()) c.pipeline.split = partition::parse_split_points(o.split);
  c.pipeline.partition = parse_enum<partition::PartitionMethod>(o.partition);
  c.pipeline.recompute = parse_enum<partition::Recompute>(o.recompute);
  c.pipeline.schedule_file = o.schedule_file;
  c.replicas.replicas = o.replicas;
  c.replicas.bucket_bytes = bucket_bytes_of(o.bucket_size);
  c.replicas.grad_compression = parse_enum<dp::Compression>(o.grad_compression);
  c.replicas.sync_batch_norm = o.sync_batch_norm;
  c.ps.servers = o.ps;
  c.ps.addresses = o.ps_servers;
  c.ps.mode = parse_enum<dp::UpdateMode>(o.ps_mode);
  c.ps.staleness = o.staleness;
  if (!o.ps_optimizer.empty()) c.ps.optimizer = parse_enum<dp::SparseOptimizerKind>(o.ps_optimizer);
  c.ps.lr = o.ps_lr;
  c.ps.dir = o.ps_dir;
  c.ps.admit_after = o.ps_admit_after;
  c.ps.max_rows = o.ps_max_rows;
  c.ps.row_ttl = o.ps_row_ttl;
  c.optimizer.kind = parse_enum<models::OptimizerKind>(o.optimizer);
  c.optimizer.lr = o.lr;
  c.optimizer.momentum = o.momentum;
  c.optimizer.weight_decay = o.weight_decay;
  c.timeouts.stage_seconds = o.stage_timeout_seconds;
  c.timeouts.heartbeat_seconds = o.heartbeat_timeout_seconds;
  c.timeouts.startup_seconds = o.startup_timeout_seconds;
  c.seed = o.seed;
  c.transport = parse_enum<train::TransportKind>(o.transport);
  c.load_path = o.load_path;
  c.checkpoints.dir = o.checkpoint_dir;
  c.checkpoints.every_steps = o.checkpoint_every;
  c.checkpoints.every_seconds = o.checkpoint_every_seconds;
  c.checkpoints.keep = o.keep_checkpoints;
  c.checkpoints.on_error = parse_enum<train::CheckpointErrorPolicy>(o.on_checkpoint_error);
  c.checkpoints.resume = o.resume;
  c.recovery.max_bad_steps = o.max_bad_steps;
  c.recovery.rollback_lr_factor = o.rollback_lr_factor;
  c.recovery.clip_grad_norm = o.clip_grad_norm;
  c.numerics.precision = parse_enum<models::Precision>(o.precision);
  c.numerics.loss_scale = o.loss_scale;
  c.numerics.initial_loss_scale = o.initial_loss_scale;
  c.numerics.loss_scale_window = o.loss_scale_window;
  c.numerics.allow_tf32 = o.allow_tf32;
  c.numerics.deterministic = o.deterministic;
  c.resources.device = o.device;
  if (!o.devices.empty()) c.resources.devices = comma_list(o.devices);
  c.resources.threads = o.threads;
  if (!o.device_memory.empty()) c.resources.device_memory = flag_value("--device-memory", o.device_memory, parse_bytes);
  return c;
}

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
  cmd->add_option("--checkpoint-dir", o.checkpoint_dir,
                  "write checkpoints of the whole job (weights, optimizer state, step, data position) to D/step-N/");
  cmd->add_option("--checkpoint-every", o.checkpoint_every, "checkpoint every N steps (and after the last)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--checkpoint-every-seconds", o.checkpoint_every_seconds, "checkpoint every S seconds")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--keep-checkpoints", o.keep_checkpoints, "newest complete checkpoints kept")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--on-checkpoint-error", o.on_checkpoint_error, "stop or continue when a checkpoint cannot be written")
      ->capture_default_str()->check(CLI::IsMember({"stop", "continue"}));
  cmd->add_option("--resume", o.resume,
                  "continue a job from a checkpoint: D/step-N, or D for its newest complete one (--steps stays the "
                  "job's total)");
  cmd->add_option("--max-bad-steps", o.max_bad_steps,
                  "non-finite steps in a row (each skipped on every rank) that roll back to the newest checkpoint")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--rollback-lr-factor", o.rollback_lr_factor, "learning rate after a rollback, relative to before")
      ->capture_default_str()->check(CLI::Range(1e-6, 1.0));
  cmd->add_option("--clip-grad-norm", o.clip_grad_norm, "clip gradients by the norm of the whole model (0: off)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--log-every", o.log_every, "progress line every N steps when output is not a terminal")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup-steps", o.warmup_steps, "steps left out of the steady-state throughput figures")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--stages", o.stages, "pipeline stages, one thread and device each (default: from --split, else 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--micro-batches", o.micro_batches, "micro-batches per mini-batch (default: one per stage)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--schedule", o.schedule, "gpipe, 1f1b, interleaved or zb-h1")->capture_default_str();
  cmd->add_option("--chunks", o.chunks, "model chunks per stage (default: 2 for interleaved, else 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--schedule-file", o.schedule_file, "run these programs, one line per stage in the text form "
                                                      "(e.g. 'F0 sA0 F1 sA1 rG0 B0 rG1 B1 RG S'); checked by the "
                                                      "simulator before anything runs");
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
  cmd->add_flag("--sync-batch-norm", o.sync_batch_norm,
               "batch-norm statistics over the samples of every replica of a stage (as torch's SyncBatchNorm)");
  cmd->add_flag("--allow-tf32", o.allow_tf32,
               "CUDA: TF32 tensor-core math for fp32 convolutions and matrix products (faster, ~1e-3 relative error)");
  cmd->add_flag("--deterministic", o.deterministic,
               "CUDA: only deterministic cuDNN algorithms and ordered embedding-gradient sums (same bits every run; slower)");
  cmd->add_option("--grad-compression", o.grad_compression,
                  "none, fp16 or bf16 (all-reduce gradients in 16 bits, each pre-divided by the replica count)")
      ->capture_default_str();
  cmd->add_option("--precision", o.precision,
                  "fp32, bf16 or fp16: activations, their gradients, convolutions and matrix products in 16 bits; "
                  "weights, optimizer state, batch-norm statistics and the loss stay fp32")
      ->capture_default_str();
  cmd->add_option("--loss-scale", o.loss_scale, "fp16: a fixed loss scale; 0 (default) scales dynamically")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--initial-loss-scale", o.initial_loss_scale, "fp16 dynamic loss scaling: the first scale")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--loss-scale-window", o.loss_scale_window,
                  "fp16 dynamic loss scaling: steps without overflow before the scale doubles")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
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
  cmd->add_option("--staleness", o.staleness, "bounded: a pull of step t waits until step t-s is applied")
      ->capture_default_str()->check(CLI::Range(0, 1000000));
  cmd->add_option("--ps-optimizer", o.ps_optimizer, "sparse optimizer on the servers: sgd, adagrad or adam "
                                                    "(default: --optimizer)");
  cmd->add_option("--ps-lr", o.ps_lr, "learning rate of the sparse optimizer (default: --lr)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--ps-dir", o.ps_dir, "with --ps: the servers keep their shards here and resume from them");
  add_table_bound_options(*cmd, o.ps_admit_after, o.ps_max_rows, o.ps_row_ttl, "--ps-");
  cmd->add_option("--eval-batches", o.eval_batches, "evaluate on at most N test batches (default: all)");
  cmd->callback([&o] { std::exit(run_train(o)); });
}

int run_train(const TrainOptions& o) {
  const train::JobConfig config = job_config_of(o);
  train::FitOptions fit;
  fit.summary_path = o.summary_path;
  fit.save_path = o.save_path;
  fit.trace_path = o.trace_path;
  std::tie(fit.trace_first, fit.trace_last) = train::parse_trace_steps(o.trace_steps);
  fit.log_every = o.log_every;
  fit.warmup_steps = o.warmup_steps;
  train::FitCallbacks callbacks;
  callbacks.on_start = [](const train::Engine& engine, std::int64_t total_steps) {
    const auto& plan = engine.plan();
    std::fprintf(stderr, "pipewright train: %s (%lld parameters, %s activations/sample) on %s%s, %s, batch %lld, %lld steps\n",
                 plan.model.name.c_str(), static_cast<long long>(plan.stats.parameters),
                 format_bytes(plan.stats.activation_bytes_per_sample).c_str(), describe_job(engine).c_str(),
                 plan.parameter_servers ? (" with " + plan.parameter_servers->describe()).c_str() : "",
                 plan.data.name.c_str(), static_cast<long long>(plan.config.data.batch_size),
                 static_cast<long long>(total_steps));
    if (plan.precision != models::Precision::Fp32) {
      // Say how the 16-bit math runs here: a CPU without native instructions is correct but slower.
      std::string how = engine.device().is_cuda() ? "CUDA" : "CPU";
      if (engine.device().is_cpu())
        how += plan.precision == models::Precision::Bf16
                   ? " bf16 " + kernels::cpu_bf16_description()
                   : " fp16: f16 storage, convolutions and matrix products in f32 (oneDNN 2.6 has no f16 kernels for "
                     "this CPU; slower than fp32)";
      std::fprintf(stderr, "pipewright train: precision %s (F32 master weights); %s\n",
                   models::precision_name(plan.precision), how.c_str());
    }
  };
  train::run_job(config, fit, callbacks);
  return 0;
}

}  // namespace pw::tools
