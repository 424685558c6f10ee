// `pipewright train`: the flags become a JobConfig and the engine runs it (train/fit.h).
#include "tools/train_command.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>

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


// Which flag sets which field: the CLI's names for the paths a ConfigError gives.
const std::vector<std::pair<std::string, std::string>>& flag_of_path() {
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"/model/name", "--model"}, {"/model/width", "--width"}, {"/model/embedding_rows", "--embedding-rows"},
      {"/model/embedding_dim", "--embedding-dim"}, {"/data/dataset", "--dataset"},
      {"/data/synthetic_shape", "--synthetic-shape"}, {"/data/synthetic_size", "--synthetic-size"},
      {"/data/image_size", "--image-size"}, {"/data/augment", "--augment"},
      {"/data/batch_size", "--batch-size"}, {"/data/epochs", "--epochs"}, {"/data/steps", "--steps"},
      {"/data/eval_batches", "--eval-batches"}, {"/pipeline/stages", "--stages"},
      {"/pipeline/micro_batches", "--micro-batches"}, {"/pipeline/schedule", "--schedule"},
      {"/pipeline/chunks", "--chunks"}, {"/pipeline/split", "--split"}, {"/pipeline/partition", "--partition"},
      {"/pipeline/recompute", "--recompute"}, {"/pipeline/schedule_file", "--schedule-file"},
      {"/replicas/replicas", "--replicas"}, {"/replicas/bucket_bytes", "--bucket-size"},
      {"/replicas/grad_compression", "--grad-compression"}, {"/replicas/sync_batch_norm", "--sync-batch-norm"},
      {"/ps/servers", "--ps"}, {"/ps/addresses", "--ps-servers"}, {"/ps/mode", "--ps-mode"},
      {"/ps/staleness", "--staleness"}, {"/ps/optimizer", "--ps-optimizer"}, {"/ps/lr", "--ps-lr"},
      {"/ps/dir", "--ps-dir"}, {"/ps/admit_after", "--ps-admit-after"}, {"/ps/max_rows", "--ps-max-rows"},
      {"/ps/row_ttl", "--ps-row-ttl"}, {"/optimizer/kind", "--optimizer"}, {"/optimizer/lr", "--lr"},
      {"/optimizer/momentum", "--momentum"}, {"/optimizer/weight_decay", "--weight-decay"},
      {"/timeouts/stage_seconds", "--stage-timeout"}, {"/timeouts/heartbeat_seconds", "--heartbeat-timeout"},
      {"/timeouts/startup_seconds", "--startup-timeout"}, {"/checkpoints/dir", "--checkpoint-dir"},
      {"/checkpoints/every_steps", "--checkpoint-every"}, {"/checkpoints/every_seconds", "--checkpoint-every-seconds"},
      {"/checkpoints/keep", "--keep-checkpoints"}, {"/checkpoints/on_error", "--on-checkpoint-error"},
      {"/checkpoints/resume", "--resume"}, {"/recovery/max_bad_steps", "--max-bad-steps"},
      {"/recovery/rollback_lr_factor", "--rollback-lr-factor"}, {"/recovery/clip_grad_norm", "--clip-grad-norm"},
      {"/numerics/precision", "--precision"}, {"/numerics/loss_scale", "--loss-scale"},
      {"/numerics/initial_loss_scale", "--initial-loss-scale"}, {"/numerics/loss_scale_window", "--loss-scale-window"},
      {"/numerics/allow_tf32", "--allow-tf32"}, {"/numerics/deterministic", "--deterministic"}, {"/seed", "--seed"},
      {"/transport", "--transport"}, {"/load_path", "--load"}, {"/resources/device", "--device"},
      {"/resources/devices", "--devices"}, {"/resources/threads", "--threads"},
      {"/resources/device_memory", "--device-memory"}, {"/resources/data_dir", "--data-dir"}};
  return table;
}

// A flag whose text the config holds as another type: parsed when the flag is read, and an error
// names the flag.
template <typename T, typename Parse>
CLI::Option* add_parsed(CLI::App& cmd, const std::string& flag, T& field, Parse parse, const std::string& help) {
  return cmd.add_option_function<std::string>(
      flag,
      [flag, &field, parse](const std::string& text) {
        try {
          field = parse(text);
        } catch (const InputError& e) {
          throw InputError(flag + ": " + e.what());
        }
      },
      help);
}

template <typename E>
CLI::Option* add_enum(CLI::App& cmd, const std::string& flag, E& field, const std::string& help) {
  return add_parsed(cmd, flag, field, [](const std::string& text) { return parse_enum<E>(text); },
                    enum_choices<E>() + (help.empty() ? "" : ": " + help))
      ->default_str(std::string(enum_name(field)));
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

std::string with_flag_names(const train::ConfigError& error) {
  for (const auto& [path, flag] : flag_of_path())
    if (error.path() == path || error.path().rfind(path + "/", 0) == 0) return flag + ": " + error.problem();
  return error.what();
}

void add_train_command(CLI::App& app, TrainCommand& t) {
  auto* cmd = app.add_subcommand("train", "train a model on one device or as a pipeline of stages");
  cmd->formatter(std::make_shared<WrappingFormatter>());
  auto& job = t.job;
  auto& fit = t.fit;
  // First, so that the flags beside it override the fields it sets (CLI11 applies options in the
  // order they were added).
  cmd->add_option_function<std::string>(
         "--config",
         [&job](const std::string& path) {
           std::ifstream in(path);
           PW_INPUT_CHECK(in.good(), "--config " << path << ": cannot read this file");
           nlohmann::json j;
           try {
             j = nlohmann::json::parse(in);
           } catch (const nlohmann::json::exception& e) {
             throw InputError("--config " + path + ": not JSON (" + e.what() + ")");
           }
           try {
             job = train::job_config_from_json(j);
           } catch (const train::ConfigError& e) {
             throw InputError("--config " + path + ": " + e.what());
           }
         },
         "start from this job config (JSON, as --print-config writes it); flags beside it override its fields")
      ->group("Config");
  cmd->add_flag("--print-config", t.print_config, "write the job's config as JSON to stdout instead of training")
      ->group("Config");

  const std::string model = "Model";
  cmd->add_option("--model", job.model.name, "seed-cnn, resnet18/34/50/101/152, vgg16, dlrm")->capture_default_str()->group(model);
  cmd->add_option("--width", job.model.width, "ResNet base width / VGG width scale (64 = standard)")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(model);
  cmd->add_option("--embedding-rows", job.model.embedding_rows,
                  "dlrm: rows of each sparse feature's table, e.g. 10000000,10000000,10000000 (default 1000 each; "
                  "at most 2^24)")->delimiter(',')->group(model);
  cmd->add_option("--embedding-dim", job.model.embedding_dim, "dlrm: width of the embedding rows")->capture_default_str()
      ->check(CLI::Range(1, 4096))->group(model);
  cmd->add_option("--seed", job.seed, "seed of weights, shuffling and dropout")->capture_default_str()->group(model);
  cmd->add_option("--load", job.load_path, "start from these weights (safetensors)")->group(model);

  const std::string data = "Data";
  cmd->add_option("--dataset", job.data.dataset,
                  "fashion-mnist, synthetic, synthetic-clicks (for dlrm), image-folder, shards or cifar10")
      ->capture_default_str()->group(data);
  cmd->add_option("--data-dir", job.resources.data_dir,
                  "fashion-mnist: folder with the IDX files (default $PW_FASHION_MNIST_DIR or "
                  "/usr/share/datasets/fashion-mnist); image-folder: ROOT of ROOT/train/CLASS/*.jpg and "
                  "ROOT/val/CLASS/*.jpg; shards: what pipewright data pack wrote (the folder, or a brace pattern "
                  "such as DIR/train-{000000..000031}.tar); cifar10: folder with data_batch_1.bin ... test_batch.bin")->group(data);
  cmd->add_option("--image-size", job.data.image_size, "image-folder, shards: samples are 3 x S x S")->capture_default_str()
      ->check(CLI::Range(1, 8192))->group(data);
  cmd->add_option("--augment", job.data.augment,
                  "image-folder, shards: imagenet (RandomResizedCrop + flip in training) or none (Resize + "
                  "CenterCrop)")
      ->capture_default_str()->check(CLI::IsMember({"imagenet", "none"}))->group(data);
  add_parsed(*cmd, "--synthetic-shape", job.data.synthetic_shape, models::data::parse_sample_shape,
             "CxHxW of synthetic samples")->default_str("1x28x28")->group(data);
  cmd->add_option("--synthetic-size", job.data.synthetic_size, "training samples of the synthetic data set")
      ->capture_default_str()->group(data);
  cmd->add_option("--batch-size", job.data.batch_size, "global mini-batch size")->capture_default_str()
      ->check(CLI::PositiveNumber)->group(data);
  cmd->add_option("--epochs", job.data.epochs, "passes over the training set")->capture_default_str()
      ->check(CLI::PositiveNumber)->group(data);
  cmd->add_option("--steps", job.data.steps, "optimizer steps (overrides --epochs)")->check(CLI::PositiveNumber)->group(data);
  cmd->add_option("--eval-batches", job.data.eval_batches, "evaluate on at most N test batches (default: all)")
      ->group(data);

  const std::string optimizer = "Optimizer";
  add_enum(*cmd, "--optimizer", job.optimizer.kind, "")->group(optimizer);
  cmd->add_option("--lr", job.optimizer.lr, "learning rate (default: adam 0.001, sgd 0.01, adagrad 0.01)")
      ->check(CLI::PositiveNumber)->group(optimizer);
  cmd->add_option("--momentum", job.optimizer.momentum, "SGD momentum")->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))->group(optimizer);
  cmd->add_option("--weight-decay", job.optimizer.weight_decay, "L2 weight decay")->capture_default_str()
      ->check(CLI::NonNegativeNumber)->group(optimizer);
  cmd->add_option("--clip-grad-norm", job.recovery.clip_grad_norm, "clip gradients by the norm of the whole model (0: off)")
      ->capture_default_str()->check(CLI::NonNegativeNumber)->group(optimizer);

  const std::string pipeline = "Pipeline";
  cmd->add_option("--stages", job.pipeline.stages, "pipeline stages, one rank and device each (default: from --split, else 1)")
      ->check(CLI::PositiveNumber)->group(pipeline);
  cmd->add_option("--micro-batches", job.pipeline.micro_batches, "micro-batches per mini-batch (default: one per stage)")
      ->check(CLI::PositiveNumber)->group(pipeline);
  add_enum(*cmd, "--schedule", job.pipeline.schedule, "")->group(pipeline);
  cmd->add_option("--chunks", job.pipeline.chunks, "model chunks per stage (default: 2 for interleaved, else 1)")
      ->check(CLI::PositiveNumber)->group(pipeline);
  cmd->add_option("--schedule-file", job.pipeline.schedule_file,
                  "run these programs, one line per stage in the text form (e.g. 'F0 sA0 F1 sA1 rG0 B0 rG1 B1 RG S'); "
                  "checked by the simulator before anything runs")->group(pipeline);
  auto* split = add_parsed(*cmd, "--split", job.pipeline.split, partition::parse_split_points,
                           "first layer index of stages 1..P-1, e.g. 3,7,12")->group(pipeline);
  add_enum(*cmd, "--partition", job.pipeline.partition, "how stages are cut when --split is not given")
      ->excludes(split)->group(pipeline);
  add_enum(*cmd, "--recompute", job.pipeline.recompute, "which stages re-run forward instead of keeping activations")
      ->group(pipeline);
  cmd->add_option("--stage-timeout", job.timeouts.stage_seconds, "seconds a stage waits for a neighbour before failing")
      ->capture_default_str()->check(CLI::Range(0.001, 1e6))->group(pipeline);

  const std::string replicas = "Replicas";
  cmd->add_option("--replicas", job.replicas.replicas,
                  "data-parallel replicas of the pipeline; --batch-size is the global batch, split evenly over them")
      ->capture_default_str()->check(CLI::Range(1, 4096))->group(replicas);
  add_parsed(*cmd, "--bucket-size", job.replicas.bucket_bytes, parse_bytes,
             "gradients are all-reduced in buckets of about this size")->default_str("25MiB")->group(replicas);
  cmd->add_flag("--sync-batch-norm", job.replicas.sync_batch_norm,
                "batch-norm statistics over the samples of every replica of a stage (as torch's SyncBatchNorm)")
      ->group(replicas);
  add_enum(*cmd, "--grad-compression", job.replicas.grad_compression,
           "all-reduce gradients in 16 bits, each pre-divided by the replica count")->group(replicas);

  const std::string servers = "Parameter servers";
  cmd->add_option("--ps", job.ps.servers, "parameter servers holding the embedding tables (run in this process unless "
                                          "started by pipewright launch --ps or given with --ps-servers)")
      ->check(CLI::Range(0, 64))->group(servers);
  cmd->add_option("--ps-servers", job.ps.addresses, "HOST:PORT,... of running parameter servers (pipewright ps serve; "
                                                    "the job token comes from PW_JOB_TOKEN)")->group(servers);
  add_enum(*cmd, "--ps-mode", job.ps.mode, "bounded waits as --staleness says")->group(servers);
  cmd->add_option("--staleness", job.ps.staleness, "bounded: a pull of step t waits until step t-s is applied")
      ->capture_default_str()->check(CLI::Range(0, 1000000))->group(servers);
  cmd->add_option_function<std::string>(
         "--ps-optimizer",
         [&job](const std::string& text) {
           try {
             job.ps.optimizer = parse_enum<dp::SparseOptimizerKind>(text);
           } catch (const InputError& e) {
             throw InputError(std::string("--ps-optimizer: ") + e.what());
           }
         },
         "sparse optimizer on the servers: " + enum_choices<dp::SparseOptimizerKind>() + " (default: --optimizer)")
      ->group(servers);
  cmd->add_option("--ps-lr", job.ps.lr, "learning rate of the sparse optimizer (default: --lr)")
      ->check(CLI::PositiveNumber)->group(servers);
  cmd->add_option("--ps-dir", job.ps.dir, "with --ps: the servers keep their shards here and resume from them")
      ->group(servers);
  add_table_bound_options(*cmd, job.ps.admit_after, job.ps.max_rows, job.ps.row_ttl, "--ps-");
  for (const char* flag : {"--ps-admit-after", "--ps-max-rows", "--ps-row-ttl"}) cmd->get_option(flag)->group(servers);

  const std::string checkpoints = "Checkpoints";
  cmd->add_option("--checkpoint-dir", job.checkpoints.dir,
                  "write checkpoints of the whole job (weights, optimizer state, step, data position) to D/step-N/")
      ->group(checkpoints);
  cmd->add_option("--checkpoint-every", job.checkpoints.every_steps, "checkpoint every N steps (and after the last)")
      ->check(CLI::PositiveNumber)->group(checkpoints);
  cmd->add_option("--checkpoint-every-seconds", job.checkpoints.every_seconds, "checkpoint every S seconds")
      ->check(CLI::PositiveNumber)->group(checkpoints);
  cmd->add_option("--keep-checkpoints", job.checkpoints.keep, "newest complete checkpoints kept")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(checkpoints);
  add_enum(*cmd, "--on-checkpoint-error", job.checkpoints.on_error, "when a checkpoint cannot be written")
      ->group(checkpoints);
  cmd->add_option("--resume", job.checkpoints.resume,
                  "continue a job from a checkpoint: D/step-N, or D for its newest complete one (--steps stays the "
                  "job's total)")->group(checkpoints);
  cmd->add_option("--max-bad-steps", job.recovery.max_bad_steps,
                  "non-finite steps in a row (each skipped on every rank) that roll back to the newest checkpoint")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(checkpoints);
  cmd->add_option("--rollback-lr-factor", job.recovery.rollback_lr_factor, "learning rate after a rollback, relative to before")
      ->capture_default_str()->check(CLI::Range(1e-6, 1.0))->group(checkpoints);

  const std::string numerics = "Numerics";
  add_enum(*cmd, "--precision", job.numerics.precision,
           "activations, their gradients, convolutions and matrix products in 16 bits; weights, optimizer state, "
           "batch-norm statistics and the loss stay fp32")->group(numerics);
  cmd->add_option("--loss-scale", job.numerics.loss_scale, "fp16: a fixed loss scale; 0 (default) scales dynamically")
      ->check(CLI::NonNegativeNumber)->group(numerics);
  cmd->add_option("--initial-loss-scale", job.numerics.initial_loss_scale, "fp16 dynamic loss scaling: the first scale")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(numerics);
  cmd->add_option("--loss-scale-window", job.numerics.loss_scale_window,
                  "fp16 dynamic loss scaling: steps without overflow before the scale doubles")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(numerics);
  cmd->add_flag("--allow-tf32", job.numerics.allow_tf32,
                "CUDA: TF32 tensor-core math for fp32 convolutions and matrix products (faster, ~1e-3 relative error)")
      ->group(numerics);
  cmd->add_flag("--deterministic", job.numerics.deterministic,
                "CUDA: only deterministic cuDNN algorithms and ordered embedding-gradient sums (same bits every run; "
                "slower)")->group(numerics);

  const std::string devices = "Devices and processes";
  cmd->add_option("--device", job.resources.device, "cpu:N or cuda:N")->capture_default_str()->group(devices);
  add_parsed(*cmd, "--devices", job.resources.devices, comma_list,
             "one device per stage, e.g. cpu:0,cpu:1 (default cpu:0..P-1)")->group(devices);
  cmd->add_option("--threads", job.resources.threads, "threads of the CPU device (default: all)")
      ->check(CLI::PositiveNumber)->group(devices);
  add_parsed(*cmd, "--device-memory", job.resources.device_memory, parse_bytes, "memory cap of the device, e.g. 512MiB")
      ->group(devices);
  add_enum(*cmd, "--transport", job.transport,
           "auto: in-process within one process, NCCL between GPUs of a multi-process job, else Thrift")->group(devices);
  cmd->add_option("--heartbeat-timeout", job.timeouts.heartbeat_seconds,
                  "multi-process jobs: seconds after which a silent rank ends the job (a killed rank ends it at once)")
      ->capture_default_str()->check(CLI::Range(0.5, 1e6))->group(devices);
  cmd->add_option("--startup-timeout", job.timeouts.startup_seconds,
                  "multi-process jobs: seconds for every rank to reach the rendezvous")
      ->capture_default_str()->check(CLI::Range(0.1, 1e6))->group(devices);

  const std::string output = "Output";
  cmd->add_option("--summary", fit.summary_path, "write a JSON summary here")->group(output);
  cmd->add_option("--save", fit.save_path, "save the trained weights (safetensors)")->group(output);
  cmd->add_option("--log-every", fit.log_every, "progress line every N steps when output is not a terminal")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(output);
  cmd->add_option("--warmup-steps", fit.warmup_steps, "steps left out of the steady-state throughput figures")
      ->capture_default_str()->check(CLI::NonNegativeNumber)->group(output);
  cmd->add_option("--trace", fit.trace_path,
                  "write a Chrome trace (Perfetto, chrome://tracing; read by pipewright prof) of the steps; "
                  "multi-process jobs write FILE with .rankN before the extension")
      ->check([](const std::string& s) { return s.empty() ? std::string("--trace needs a file name") : std::string(); })
      ->group(output);
  cmd->add_option_function<std::string>(
         "--trace-steps",
         [&fit](const std::string& text) { std::tie(fit.trace_first, fit.trace_last) = train::parse_trace_steps(text); },
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

int run_train(const TrainCommand& t) {
  if (t.print_config) {
    train::validate(t.job);
    std::printf("%s\n", train::to_full_json(t.job).dump(2).c_str());
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
  try {
    train::run_job(t.job, t.fit, callbacks);
  } catch (const train::ConfigError& e) {
    throw InputError(with_flag_names(e));
  }
  return 0;
}

}  // namespace pw::tools
