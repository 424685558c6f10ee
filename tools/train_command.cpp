// `pipewright train`: the flags become a JobConfig and the engine runs it (train/fit.h).
#include "tools/train_command.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "core/units.h"
#include "kernels/ops/half_support.h"
#include "dataparallel/topology.h"
#include "models/data/dataset.h"
#include "models/data/normalization.h"
#include "models/zoo/model_spec.h"
#include "partition/model_description.h"
#include "rpc/job_token.h"
#include "rpc/transport.h"
#include "tools/flag_checks.h"
#include "tools/job_flags.h"
#include "train/fit.h"
#include "train/flight_dump.h"
#include "train/parameter_servers.h"
#include "tools/ps_bound_flags.h"
#include "tools/tls_flags.h"

namespace pw::tools {
namespace {

constexpr const char* kDataDirEnv = "PW_FASHION_MNIST_DIR";
using rpc::kJobTokenEnv;

std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}


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



// Descriptions wrapped to fit 100 columns beside the flag names (CLI11 2.1 does not wrap).
class WrappingFormatter : public CLI::Formatter {
 public:
  WrappingFormatter() { column_width(34); }
  std::string make_option_desc(const CLI::Option* opt) const override {
    return wrap(CLI::Formatter::make_option_desc(opt), 100 - 34);
  }
  static std::string wrap(const std::string& text, std::size_t width) {
    std::string out, line, word;
    std::istringstream words(text);
    while (words >> word) {
      if (!line.empty() && line.size() + 1 + word.size() > width) {
        out += (out.empty() ? "" : "\n") + line;
        line.clear();
      }
      line += (line.empty() ? "" : " ") + word;
    }
    if (!line.empty()) out += (out.empty() ? "" : "\n") + line;
    return out;
  }
};

}  // namespace

void add_train_command(CLI::App& app, TrainCommand& t) {
  auto* cmd = app.add_subcommand("train", "train a model on one device or as a pipeline of stages");
  cmd->formatter(std::make_shared<WrappingFormatter>());
  auto& job = t.job;
  auto& fit = t.fit;
  Binder b{*cmd, t.flags};
  // First, so that the flags beside it override the fields it sets (CLI11 applies options in the
  // order they were added).
  add_config_option(*cmd, job);
  cmd->add_flag("--print-config", t.print_config, "write the job's config as JSON to stdout instead of training")
      ->group("Config");

  const std::string model = "Model";
  b.option("--model", "/model/name", job.model.name, "seed-cnn, resnet18/34/50/101/152, vgg16, dlrm")->capture_default_str()->group(model);
  b.option("--width", "/model/width", job.model.width, "ResNet base width / VGG width scale (64 = standard)")
      ->capture_default_str()->check(Positive)->group(model);
  b.option("--embedding-rows", "/model/embedding_rows", job.model.embedding_rows,
                  "dlrm: rows of each sparse feature's table, e.g. 10000000,10000000,10000000 (default 1000 each; "
                  "at most 2^24)")->delimiter(',')->group(model);
  b.option("--embedding-dim", "/model/embedding_dim", job.model.embedding_dim, "dlrm: width of the embedding rows")->capture_default_str()
      ->check(range(1, 4096))->group(model);
  b.option("--seed", "/seed", job.seed, "seed of weights, shuffling and dropout")->capture_default_str()->group(model);
  b.option("--load", "/load_path", job.load_path, "start from these weights (safetensors)")->group(model);

  const std::string data = "Data";
  b.option("--dataset", "/data/dataset", job.data.dataset,
           "fashion-mnist, synthetic, synthetic-clicks (for dlrm), image-folder, shards or cifar10")
      ->capture_default_str()->group(data);
  b.option("--data-dir", "/resources/data_dir", job.resources.data_dir,
           "fashion-mnist: folder with the IDX files (default $" + std::string(kDataDirEnv) + " or " +
               models::data::kFashionMnistDefaultDir + "); image-folder: ROOT of ROOT/train/CLASS/*.jpg and "
               "ROOT/val/CLASS/*.jpg; shards: what pipewright data pack wrote (the folder, or a brace pattern such as "
               "DIR/train-{000000..000031}.tar); cifar10: folder with data_batch_1.bin ... test_batch.bin")
      ->group(data);
  b.option("--image-size", "/data/image_size", job.data.image_size, "image-folder, shards: samples are 3 x S x S")
      ->capture_default_str()->check(range(1, 8192))->group(data);
  b.choice("--augment", "/data/augment", job.data.augment,
           "image-folder, shards: RandomResizedCrop + flip in training, or Resize + CenterCrop")
      ->group(data);
  b.flag_setting("--skip-bad-samples", "/data/bad_samples", job.data.bad_samples, models::data::BadSamples::Skip,
                 "image-folder, shards: an image that does not decode gives way to the next that does (counted in the "
                 "summary) instead of ending the job")
      ->group(data);
  b.parsed("--normalize", "/data/normalize", job.data.normalize, models::data::parse_normalization,
           "image-folder, shards, cifar10: per-channel MEAN,...:STD,... of (pixel / 255 - mean) / std, one value a side "
           "or three (default ImageNet's 0.485,0.456,0.406:0.229,0.224,0.225; CIFAR-10's own for cifar10)")
      ->group(data);
  b.parsed("--synthetic-shape", "/data/synthetic_shape", job.data.synthetic_shape, models::data::parse_sample_shape,
             "CxHxW of synthetic samples")->default_str("1x28x28")->group(data);
  b.option("--synthetic-size", "/data/synthetic_size", job.data.synthetic_size, "training samples of the synthetic data set")
      ->capture_default_str()->group(data);
  b.option("--batch-size", "/data/batch_size", job.data.batch_size, "global mini-batch size")->capture_default_str()
      ->check(Positive)->group(data);
  b.option("--epochs", "/data/epochs", job.data.epochs, "passes over the training set")->capture_default_str()
      ->check(Positive)->group(data);
  b.option("--steps", "/data/steps", job.data.steps, "optimizer steps (overrides --epochs)")->check(Positive)->group(data);
  b.option("--eval-batches", "/data/eval_batches", job.data.eval_batches, "evaluate on at most N test batches (default: all)")
      ->group(data);

  const std::string optimizer = "Optimizer";
  b.choice("--optimizer", "/optimizer/kind", job.optimizer.kind, "")->group(optimizer);
  b.option("--lr", "/optimizer/lr", job.optimizer.lr, "learning rate (default: adam 0.001, sgd 0.01, adagrad 0.01)")
      ->check(Positive)->group(optimizer);
  b.option("--momentum", "/optimizer/momentum", job.optimizer.momentum, "SGD momentum")->capture_default_str()
      ->check(range(0.0, 1.0))->group(optimizer);
  b.option("--weight-decay", "/optimizer/weight_decay", job.optimizer.weight_decay, "L2 weight decay")->capture_default_str()
      ->check(NonNegative)->group(optimizer);
  b.option("--clip-grad-norm", "/recovery/clip_grad_norm", job.recovery.clip_grad_norm, "clip gradients by the norm of the whole model (0: off)")
      ->capture_default_str()->check(NonNegative)->group(optimizer);
  b.choice("--update-validation", "/recovery/update_validation", job.recovery.update_validation,
           "whether stages update before the job's verdict on the step (finite, clipped) and undo it when it "
           "differs (after), or wait for it (before); auto: after with zero-bubble schedules unless the optimizer is offloaded; same weights either way")
      ->group(optimizer);
  b.flag_setting("--offload-optimizer", "/optimizer/offload", job.optimizer.offload, models::OptimizerOffload::Host,
                 "keep each rank's optimizer state (its owned slices with --shard-optimizer) in host memory, "
                 "outside the device's cap, and run the update there with the vectorised CPU optimizer (ZeRO-Offload)")
      ->group(optimizer);

  const std::string pipeline = "Pipeline";
  b.option("--stages", "/pipeline/stages", job.pipeline.stages, "pipeline stages, one rank and device each (default: from --split, else 1)")
      ->check(Positive)->group(pipeline);
  b.option("--micro-batches", "/pipeline/micro_batches", job.pipeline.micro_batches, "micro-batches per mini-batch (default: one per stage)")
      ->check(Positive)->group(pipeline);
  b.choice("--schedule", "/pipeline/schedule", job.pipeline.schedule, "")->group(pipeline);
  b.option("--chunks", "/pipeline/chunks", job.pipeline.chunks, "model chunks per stage (default: 2 for interleaved, else 1)")
      ->check(Positive)->group(pipeline);
  b.option("--schedule-file", "/pipeline/schedule_file", job.pipeline.schedule_file,
                  "run these programs, one line per stage in the text form (e.g. 'F0 sA0 F1 sA1 rG0 B0 rG1 B1 RG S'); "
                  "checked by the simulator before anything runs")->group(pipeline);
  auto* split = b.parsed("--split", "/pipeline/split", job.pipeline.split, partition::parse_split_points,
                           "first layer index of stages 1..P-1, e.g. 3,7,12")->group(pipeline);
  b.choice("--partition", "/pipeline/partition", job.pipeline.partition, "how stages are cut when --split is not given")
      ->excludes(split)->group(pipeline);
  b.recompute(job.pipeline, "which stages re-run forward instead of keeping activations")
      ->group(pipeline);
  b.option("--recompute-layers", "/pipeline/recompute_layers", job.pipeline.recompute_layers,
           "layers (by name, e.g. block3,block4) that keep no activations and re-run their forward before their backward")
      ->delimiter(',')->group(pipeline);
  b.option("--stage-timeout", "/timeouts/stage_seconds", job.timeouts.stage_seconds, "seconds a stage waits for a neighbour before failing")
      ->capture_default_str()->check(range(0.001, 1e6))->group(pipeline);

  const std::string replicas = "Replicas";
  b.option("--replicas", "/replicas/replicas", job.replicas.replicas,
                  "data-parallel replicas of the pipeline; --batch-size is the global batch, split evenly over them")
      ->capture_default_str()->check(range(1, 4096))->group(replicas);
  b.parsed("--bucket-size", "/replicas/bucket_bytes", job.replicas.bucket_bytes, parse_bytes,
             "gradients are all-reduced in buckets of about this size")->default_str("25MiB")->group(replicas);
  b.flag("--sync-batch-norm", "/replicas/sync_batch_norm", job.replicas.sync_batch_norm,
                "batch-norm statistics over the samples of every replica of a stage (as torch's SyncBatchNorm)")
      ->group(replicas);
  b.choice("--grad-compression", "/replicas/grad_compression", job.replicas.grad_compression,
           "all-reduce gradients in 16 bits, each pre-divided by the replica count")->group(replicas);
  b.flag_setting("--shard-optimizer", "/replicas/optimizer_state", job.replicas.optimizer_state,
                 dp::OptimizerState::Sharded,
                 "each replica of a stage keeps optimizer state for, and updates, its 1/R of the stage's "
                 "parameters only: gradients are reduce-scattered, updated weights all-gathered (ZeRO-1)")
      ->group(replicas);
  b.choice("--cpu-collectives", "/replicas/cpu_collectives", job.replicas.cpu_collectives,
           "collectives of CPU replicas: gloo (its connections carry no job token), links (the job's "
           "token-checked links) or auto (links when a rank's address is not loopback)")->group(replicas);

  const std::string servers = "Parameter servers";
  b.option("--ps", "/ps/servers", job.ps.servers, "parameter servers holding the embedding tables (run in this process unless "
                                          "started by pipewright launch --ps or given with --ps-servers)")
      ->check(range(0, 64))->group(servers);
  b.option("--ps-servers", "/ps/addresses", job.ps.addresses, "HOST:PORT,... of running parameter servers (pipewright ps serve; "
                                                    "the job token comes from PW_JOB_TOKEN)")->group(servers);
  b.choice("--ps-mode", "/ps/mode", job.ps.mode, "bounded waits as --staleness says")->group(servers);
  b.option("--staleness", "/ps/staleness", job.ps.staleness, "bounded: a pull of step t waits until step t-s is applied")
      ->capture_default_str()->check(range(0, 1000000))->group(servers);
  b.parsed("--ps-optimizer", "/ps/optimizer", job.ps.optimizer,
           [](const std::string& text) { return std::optional(parse_enum<dp::SparseOptimizerKind>(text)); },
           "sparse optimizer on the servers: " + enum_choices<dp::SparseOptimizerKind>() + " (default: --optimizer)")
      ->group(servers);
  b.option("--ps-lr", "/ps/lr", job.ps.lr, "learning rate of the sparse optimizer (default: --lr)")
      ->check(Positive)->group(servers);
  b.option("--ps-dir", "/ps/dir", job.ps.dir, "with --ps: the servers keep their shards here and resume from them")
      ->group(servers);
  add_table_bound_options(*cmd, job.ps.admit_after, job.ps.max_rows, job.ps.row_ttl, "--ps-");
  for (const char* field : {"admit_after", "max_rows", "row_ttl"}) {
    std::string flag = std::string("--ps-") + field;
    std::replace(flag.begin(), flag.end(), '_', '-');
    cmd->get_option(flag)->group(servers);
    t.flags.add(std::string("/ps/") + field, flag);
  }
  t.flags.add("/ps/token", kJobTokenEnv);   // read from the environment by run_train

  const std::string checkpoints = "Checkpoints";
  b.option("--checkpoint-dir", "/checkpoints/dir", job.checkpoints.dir,
                  "write checkpoints of the whole job (weights, optimizer state, step, data position) to D/step-N/")
      ->group(checkpoints);
  b.option("--checkpoint-every", "/checkpoints/every_steps", job.checkpoints.every_steps, "checkpoint every N steps (and after the last)")
      ->check(Positive)->group(checkpoints);
  b.option("--checkpoint-every-seconds", "/checkpoints/every_seconds", job.checkpoints.every_seconds, "checkpoint every S seconds")
      ->check(Positive)->group(checkpoints);
  b.option("--keep-checkpoints", "/checkpoints/keep", job.checkpoints.keep, "newest complete checkpoints kept")
      ->capture_default_str()->check(Positive)->group(checkpoints);
  b.choice("--on-checkpoint-error", "/checkpoints/on_error", job.checkpoints.on_error, "when a checkpoint cannot be written")
      ->group(checkpoints);
  b.option("--resume", "/checkpoints/resume", job.checkpoints.resume,
                  "continue a job from a checkpoint: D/step-N, or D for its newest complete one (--steps stays the "
                  "job's total)")->group(checkpoints);
  b.option("--max-bad-steps", "/recovery/max_bad_steps", job.recovery.max_bad_steps,
                  "non-finite steps in a row (each skipped on every rank) that roll back to the newest checkpoint")
      ->capture_default_str()->check(Positive)->group(checkpoints);
  b.option("--rollback-lr-factor", "/recovery/rollback_lr_factor", job.recovery.rollback_lr_factor, "learning rate after a rollback, relative to before")
      ->capture_default_str()->check(range(1e-6, 1.0))->group(checkpoints);
  b.option("--max-rollbacks", "/recovery/max_rollbacks", job.recovery.max_rollbacks,
           "rollbacks in a row that do not get past the step where the last one began before the job gives up "
           "(exit status 6)")
      ->capture_default_str()->check(NonNegative)->group(checkpoints);

  const std::string numerics = "Numerics";
  b.choice("--precision", "/numerics/precision", job.numerics.precision,
           "activations, their gradients, convolutions and matrix products in 16 bits; weights, optimizer state, "
           "batch-norm statistics and the loss stay fp32")->group(numerics);
  b.option("--loss-scale", "/numerics/loss_scale", job.numerics.loss_scale, "fp16: a fixed loss scale; 0 (default) scales dynamically")
      ->check(NonNegative)->group(numerics);
  b.option("--initial-loss-scale", "/numerics/initial_loss_scale", job.numerics.initial_loss_scale, "fp16 dynamic loss scaling: the first scale")
      ->capture_default_str()->check(Positive)->group(numerics);
  b.option("--loss-scale-window", "/numerics/loss_scale_window", job.numerics.loss_scale_window,
                  "fp16 dynamic loss scaling: steps without overflow before the scale doubles")
      ->capture_default_str()->check(Positive)->group(numerics);
  b.flag("--allow-tf32", "/numerics/allow_tf32", job.numerics.allow_tf32,
                "CUDA: TF32 tensor-core math for fp32 convolutions and matrix products (faster, ~1e-3 relative error)")
      ->group(numerics);
  b.flag("--deterministic", "/numerics/deterministic", job.numerics.deterministic,
                "CUDA: only deterministic cuDNN algorithms and ordered embedding-gradient sums (same bits every run; "
                "slower)")->group(numerics);

  const std::string devices = "Devices and processes";
  b.parsed("--device", "/resources/device", job.resources.device, kernels::Device::parse, "cpu:N or cuda:N")
      ->default_str(job.resources.device.str())->group(devices);
  b.parsed("--devices", "/resources/devices", job.resources.devices, parse_device_list,
             "one device per stage, e.g. cpu:0,cpu:1 (default cpu:0..P-1)")->group(devices);
  b.option("--threads", "/resources/threads", job.resources.threads, "threads of the CPU device (default: all)")
      ->check(Positive)->group(devices);
  b.option("--prefetch-batches", "/resources/prefetch_batches", job.resources.prefetch_batches,
           "training batches decoded ahead of the step that needs them (0: when asked for)")
      ->capture_default_str()->check(NonNegative)->group(devices);
  b.option("--loader-threads", "/resources/loader_threads", job.resources.loader_threads,
           "threads of the data loader's own pool (default 0: shared with the machine)")
      ->capture_default_str()->check(NonNegative)->group(devices);
  b.parsed("--device-memory", "/resources/device_memory", job.resources.device_memory, parse_bytes, "memory cap of the device, e.g. 512MiB")
      ->group(devices);
  b.choice("--transport", "/transport", job.transport,
           "auto: in-process within one process, NCCL between GPUs of a multi-process job, else Thrift")->group(devices);
  b.option("--heartbeat-timeout", "/timeouts/heartbeat_seconds", job.timeouts.heartbeat_seconds,
                  "multi-process jobs: seconds after which a silent rank ends the job (a killed rank ends it at once)")
      ->capture_default_str()->check(range(0.5, 1e6))->group(devices);
  b.option("--startup-timeout", "/timeouts/startup_seconds", job.timeouts.startup_seconds,
                  "multi-process jobs: seconds for every rank to reach the rendezvous")
      ->capture_default_str()->check(range(0.1, 1e6))->group(devices);
  add_tls_options(*cmd, job.tls, t.flags, devices);
  t.flags.add("/tls/plain_links", "--plain-links");
  cmd->add_flag("--plain-links", job.tls.plain_links,
                "let a job whose ranks are on several hosts run without TLS: plain TCP, where every frame carries "
                "the job token in clear (only on a network you trust)")
      ->group(devices);

  const std::string output = "Output";
  cmd->add_option("--summary", fit.summary_path, "write a JSON summary here")->group(output);
  cmd->add_option("--save", fit.save_path, "save the trained weights (safetensors)")->group(output);
  cmd->add_option("--log-every", fit.log_every, "progress line every N steps when output is not a terminal")
      ->capture_default_str()->check(Positive)->group(output);
  cmd->add_option("--warmup-steps", fit.warmup_steps, "steps left out of the steady-state throughput figures")
      ->capture_default_str()->check(NonNegative)->group(output);
  cmd->add_option("--trace", fit.trace_path,
                  "write a Chrome trace (Perfetto, chrome://tracing; read by pipewright prof) of the steps; "
                  "multi-process jobs write FILE with .rankN before the extension")
      ->check([](const std::string& s) { return s.empty() ? std::string("--trace needs a file name") : std::string(); })
      ->group(output);
  cmd->add_option("--tensorboard", fit.tensorboard_dir,
                  "write TensorBoard scalars (loss, learning rate, samples/s, gradient norm, per-stage busy, "
                  "bubble and communication shares, memory, test accuracy) to event files in this folder")
      ->check([](const std::string& s) { return s.empty() ? std::string("--tensorboard needs a folder") : std::string(); })
      ->group(output);
  cmd->add_option("--metrics-port", fit.metrics_port,
                  "rank 0 serves live figures in Prometheus' text format at http://BIND:PORT/metrics (0: any free "
                  "port; read them with pipewright top)")
      ->check(range(0, 65535))->group(output);
  cmd->add_option("--debug-dir", fit.debug_dir,
                  "write every rank's flight record (its last instructions) here when the job fails on a timeout "
                  "or an abort, on SIGUSR1 and on SIGTERM, and keep a live one per rank while it runs (left by a "
                  "rank killed with SIGKILL); read them with pipewright prof --hang DIR")
      ->check([](const std::string& s) { return s.empty() ? std::string("--debug-dir needs a folder") : std::string(); })
      ->group(output);
  cmd->add_option("--straggler-threshold", fit.straggler_threshold,
                  "with replicas: report a rank whose own time per step is this much above its stage's other "
                  "replicas (0.2: 20% slower)")
      ->capture_default_str()->check(range(1e-3, 100.0))->group(output);
  cmd->add_option("--straggler-window", fit.straggler_window, "steps over which ranks are compared for stragglers")
      ->capture_default_str()->check(range(std::int64_t{1}, std::int64_t{1000000}))->group(output);
  cmd->add_option_function<std::string>(
         "--trace-steps",
         [&fit](const std::string& text) {
           try {
             std::tie(fit.trace_first, fit.trace_last) = train::parse_trace_steps(text);
           } catch (const InputError& e) {
             throw InputError(std::string("--trace-steps: ") + e.what());
           }
         },
         "trace only steps A to B-1, e.g. 10:20 (default: all; the trace keeps the latest 262144 spans)")
      ->group(output);
  cmd->callback([&t] { std::exit(run_train(t)); });
}

train::JobConfig job_config_of_train_args(const std::vector<std::string>& args) {
  PW_INPUT_CHECK(!args.empty() && args.front() == "train",
                 "expected pipewright train arguments; got '" << (args.empty() ? "" : args.front()) << "'");
  CLI::App app;
  TrainCommand t;
  add_train_command(app, t);
  app.get_subcommand("train")->callback([] {});
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    throw InputError(std::string("the train arguments after --: ") + e.what());
  }
  return t.job;
}

// What the command line takes from the environment: the Fashion-MNIST folder when no --data-dir
// is given, and the job token of parameter servers given by address.
train::JobConfig with_environment(train::JobConfig job) {
  const char* data_dir = std::getenv(kDataDirEnv);
  if (job.resources.data_dir.empty() && data_dir != nullptr) job.resources.data_dir = data_dir;
  if (!job.ps.addresses.empty() && job.ps.token.empty())
    if (const auto token = rpc::job_token_from_env()) job.ps.token = *token;
  job.tls = tls_with_environment(job.tls);
  return job;
}

// With --debug-dir, SIGUSR1 writes every local rank's flight record there (a job that seems stuck
// can be asked where it is without stopping it), and so does SIGTERM (what the launcher sends the
// ranks it stops) before the process ends as SIGTERM would have ended it. Blocked here, before any
// rank thread starts, so that only this thread receives them.
void dump_flight_records_on_signals(const std::string& dir) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([dir, set] {
    for (;;) {
      int signal = 0;
      if (sigwait(&set, &signal) != 0) continue;
      train::dump_flight_records(dir, signal == SIGTERM ? "SIGTERM (stopped from outside, e.g. by the launcher)"
                                                        : "SIGUSR1");
      if (signal != SIGTERM) continue;
      std::signal(SIGTERM, SIG_DFL);
      sigset_t term;
      sigemptyset(&term);
      sigaddset(&term, SIGTERM);
      pthread_sigmask(SIG_UNBLOCK, &term, nullptr);
      raise(SIGTERM);
    }
  }).detach();
}

int run_train(const TrainCommand& t) {
  const train::JobConfig job = with_environment(t.job);
  if (!t.fit.debug_dir.empty() && !t.print_config) dump_flight_records_on_signals(t.fit.debug_dir);
  if (t.print_config) {
    try {
      train::validate(job);
    } catch (const train::ConfigError& e) {
      throw InputError(t.flags.message_of(e));
    }
    std::printf("%s\n", train::to_full_json(job).dump(2).c_str());
    return 0;
  }
  train::FitCallbacks callbacks;
  callbacks.on_start = [](const train::Engine& engine, std::int64_t total_steps) {
    const auto& plan = engine.plan();
    std::fprintf(stderr, "pipewright train: %s (%lld parameters, %s activations/sample) on %s%s, %s, batch %lld, %lld steps\n",
                 plan.model.name.c_str(), static_cast<long long>(plan.stats.parameters),
                 format_bytes(plan.stats.activation_bytes_per_sample).c_str(), describe_job(engine).c_str(),
                 engine.parameter_servers() ? (" with " + engine.parameter_servers()->describe()).c_str() : "",
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
  // The library names fields by their paths; this command's user gave flags.
  callbacks.name_fields = [&t](const std::string& text) { return t.flags.translate(text); };
  try {
    train::run_job(job, t.fit, callbacks);
  } catch (const train::ConfigError& e) {
    throw InputError(t.flags.message_of(e));
  } catch (const rpc::AbortedError& e) {
    throw rpc::AbortedError(t.flags.translate(e.what()));
  } catch (const InputError& e) {
    throw InputError(t.flags.translate(e.what()));
  }
  return 0;
}

}  // namespace pw::tools
