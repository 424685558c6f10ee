#pragma once
// Everything that defines a training job, as plain structs: the model (a zoo name, or a program's
// own layer list with split points and ties), the data, the pipeline's shape and schedule, the
// replicas, the parameter servers, the optimizer and the timeouts. It serialises to JSON; the
// ranks of a job prove they run the same job by comparing a hash of that JSON. Where each rank
// runs (devices, threads, memory caps) and what it writes (summary, weights, trace) are local to a
// process and sit outside the hash.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipewright/dataset.h"
#include "pipewright/device.h"
#include "pipewright/enums.h"
#include "pipewright/model.h"

namespace pw::train {

struct ModelConfig {
  std::string name = "seed-cnn";   // a zoo model; ignored when JobConfig::program_model is set
  int width = 64;                  // ResNet base width / VGG width scale
  std::vector<std::int64_t> embedding_rows;   // dlrm: rows of each sparse feature's table
  int embedding_dim = 8;                      // dlrm: width of the embedding rows
};

struct DataConfig {
  // fashion-mnist, synthetic, synthetic-clicks, image-folder, shards or cifar10 (JobConfig::program_data: a program's own)
  std::string dataset = "fashion-mnist";
  std::vector<std::int64_t> synthetic_shape{1, 28, 28};   // {C, H, W}; "1x28x28" in JSON
  std::int64_t synthetic_size = 60000;
  std::int64_t batch_size = 64;   // the global batch, split over replicas and micro-batches
  std::int64_t epochs = 1;
  std::int64_t steps = -1;        // overrides epochs when > 0
  std::int64_t eval_batches = -1; // evaluate on at most this many test batches (-1: all)
  // image-folder: samples are 3 x image_size x image_size; augment "imagenet" (RandomResizedCrop +
  // flip in training) or "none" (the evaluation Resize + CenterCrop for training too).
  std::int64_t image_size = 224;
  models::data::Augment augment = models::data::Augment::ImageNet;
  // image-folder, shards: an image that does not decode fails the job ("fail") or gives way to the
  // next sample that decodes ("skip"; the summary counts them).
  models::data::BadSamples bad_samples = models::data::BadSamples::Fail;
  // image-folder, shards, cifar10: each channel's (pixel / 255 - mean) / std; "MEAN,...:STD,..." in
  // JSON (one value a side or three). Unset: the data set's own, ImageNet's or CIFAR-10's.
  std::optional<models::data::Normalization> normalize;
};

struct PipelineConfig {
  int stages = 0;          // 0: from the split when given, else 1
  int micro_batches = 0;   // 0: one per stage
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::OneFOneB;
  int chunks = 0;          // model chunks per stage; 0: 2 for interleaved, else 1
  std::vector<int> split;  // first layer of stages 1..P-1 (empty: the partition method or the model's own)
  partition::PartitionMethod partition = partition::PartitionMethod::Uniform;
  partition::Recompute recompute = partition::Recompute::None;
  // Recomputation chosen per stage: one entry per stage, each none or all (in JSON, a list as
  // /pipeline/recompute). When given, `recompute` is unused.
  std::vector<partition::Recompute> recompute_stages;
  // Selective recomputation: layers (by name) that keep no activations and re-run their forward
  // just before their backward, in stages that do not recompute everything anyway. A run of
  // consecutive named layers keeps only its input.
  std::vector<std::string> recompute_layers;
  std::string schedule_file;           // a program per stage in the text form (overrides schedule)
};

struct ReplicaConfig {
  int replicas = 1;
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  dp::Compression grad_compression = dp::Compression::None;   // 16-bit sums are pre-divided by the replica count
  bool sync_batch_norm = false;            // batch-norm statistics over every replica's samples
  // Gloo or the job's own (token-carrying) links for the replicas' CPU collectives. Part of the
  // identity: the two sum in different orders (different result bits), and every member of a
  // group must use the same one.
  dp::CpuCollectives cpu_collectives = dp::CpuCollectives::Auto;
  // Sharded: each replica of a stage keeps the optimizer state of its 1/R of the stage's
  // parameters and updates only those; gradients are reduce-scattered, weights all-gathered.
  dp::OptimizerState optimizer_state = dp::OptimizerState::Replicated;
};

struct ParameterServerConfig {
  int servers = 0;                // run in this process as threads unless addresses are given
  std::string addresses;          // HOST:PORT,... of servers started elsewhere
  // The job token those servers were started with. A secret: never written to JSON, so neither
  // checkpoints, the identity hash nor a printed config hold it.
  std::string token;
  dp::UpdateMode mode = dp::UpdateMode::Sync;
  int staleness = 1;
  std::optional<dp::SparseOptimizerKind> optimizer;   // default: the dense optimizer's kind
  double lr = 0.0;                // 0: the dense learning rate
  std::string dir;                // servers run here keep their shards in this folder
  // Bounded tables (dataparallel/ps/bounds.h): a row on an id's N-th sighting, at most max_rows
  // rows per table and shard (0: no cap), rows expire after row_ttl steps without an update (0: never).
  int admit_after = 1;
  std::int64_t max_rows = 0;
  std::int64_t row_ttl = 0;
};

struct OptimizerSettings {
  models::OptimizerKind kind = models::OptimizerKind::Adam;
  double lr = 0.0;             // 0: the optimizer's default (adam 0.001, else 0.01)
  double momentum = 0.9;
  double weight_decay = 0.0;
  // Host: each rank's optimizer state (its owned slices with sharding) lives in host memory and is
  // updated there, outside the device's cap (ZeRO-Offload).
  models::OptimizerOffload offload = models::OptimizerOffload::None;
};

struct TimeoutConfig {
  double stage_seconds = 60.0;       // a stage waiting for a neighbour or a collective
  double heartbeat_seconds = 5.0;    // a silent rank ends a multi-process job after this long
  double startup_seconds = 120.0;    // for every rank to reach the rendezvous
};

// Checkpoints of the whole job (train/checkpoint.h) and where to resume from.
struct CheckpointConfig {
  std::string dir;                  // D/step-NNNNNNN/ folders; empty: no checkpoints
  std::int64_t every_steps = 0;     // 0: not by steps
  double every_seconds = 0.0;       // 0: not by time (rank 0's clock decides for everybody)
  int keep = 3;                     // newest complete checkpoints kept
  CheckpointErrorPolicy on_error = CheckpointErrorPolicy::Stop;   // when a checkpoint cannot be written
  std::string resume;               // a checkpoint folder, or a folder of them (the newest complete one)
};

// What a step whose loss or gradients are not finite does, and gradient clipping.
struct RecoveryConfig {
  int max_bad_steps = 3;             // consecutive skipped steps that roll back to the newest checkpoint
  double rollback_lr_factor = 0.5;   // the learning rate after a rollback, relative to before
  // Rollbacks in a row, none of which trained past the step where the previous one began, before
  // the job gives up (TrainingFailed).
  int max_rollbacks = 3;
  double clip_grad_norm = 0.0;       // clip by the norm of the whole model's gradient; 0: off
  // Whether each stage updates before the job's verdict on the step (finite everywhere, clipped or
  // not) and undoes the update when it differs (after), or waits for it (before); auto: after with
  // zero-bubble schedules. The trained weights are bitwise the same either way.
  pipeline::UpdateValidation update_validation = pipeline::UpdateValidation::Auto;
};

// Mixed precision (models/precision.h, train/loss_scaler.h), and how CUDA ops may trade exactness
// for speed or reproducibility (kernels/math_mode.h; CPU ops ignore those two).
struct NumericsConfig {
  models::Precision precision = models::Precision::Fp32;   // of activations, convolutions, matrix products
  double loss_scale = 0.0;            // fp16: 0 = dynamic loss scaling, > 0 a fixed scale
  double initial_loss_scale = 65536;  // fp16 dynamic: the first scale (2^16, as torch's GradScaler)
  int loss_scale_window = 2000;       // fp16 dynamic: steps without overflow before the scale doubles
  bool allow_tf32 = false;            // TF32 tensor-core math for fp32 convolutions and matrix products
  bool deterministic = false;         // only deterministic cuDNN algorithms and ordered gradient sums
};

// Where this process's ranks run: not part of the job's identity (ranks may differ).
struct Resources {
  kernels::Device device;                // a pipeline puts its stages on cpu:0..N-1 or the GPUs
  std::vector<kernels::Device> devices;  // one per rank (replica-major), overriding `device`
  int threads = 0;                   // CPU threads per rank; 0: this machine's share
  // Training batches decoded and assembled ahead of the step that needs them (0: when asked for),
  // on a pool of `loader_threads` of their own (0: the process's default oneTBB arena, shared with
  // the machine). Neither changes a batch.
  int prefetch_batches = 2;
  int loader_threads = 0;
  std::int64_t device_memory = 0;    // cap per device in bytes ("512MiB" in JSON); 0: no cap
  std::string data_dir;              // fashion-mnist's IDX files (empty: /usr/share/datasets/fashion-mnist), an image folder's root, shards, or CIFAR-10's .bin files
};

// Mutual TLS on every Thrift link of a multi-process job (stage transports, the rendezvous,
// parameter servers; docs/running_safely.md): PEM files of this host's certificate, its private
// key (unencrypted) and the job's CA. All three or none (none: plain TCP). Each host has its own
// files: not part of the job's identity. A file that cannot be read, is not PEM, or a key that is
// not the certificate's is an InputError naming the file when the job starts.
struct TlsConfig {
  std::string cert;
  std::string key;
  std::string ca;
  // Without TLS, a job whose ranks are on more than one host refuses to start: its frames carry
  // the job token in clear. true: plain TCP is wanted anyway (a trusted network).
  bool plain_links = false;
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// A program's own data set (docs/own_model.md), as `program_model` is its own model. The engine
// calls `open` to plan the job (Train) and on every rank that reads data for both splits, possibly
// from several rank threads at once; each rank then reads only its part of every batch, from
// several loader threads at once: the first stage of a pipeline calls fill_image, the last
// fill_label. So `open` should be cheap and the data set read lazily. Every split and rank must
// give the same sample shape and classes, and the same samples. `name` stands for the data set in
// the job's JSON form, its identity hash and its checkpoints ("program:NAME").
struct ProgramDataset {
  std::string name;
  std::function<std::unique_ptr<models::data::Dataset>(models::data::Split split)> open;
};

struct JobConfig {
  ModelConfig model;
  DataConfig data;
  PipelineConfig pipeline;
  ReplicaConfig replicas;
  ParameterServerConfig ps;
  OptimizerSettings optimizer;
  TimeoutConfig timeouts;
  CheckpointConfig checkpoints;
  RecoveryConfig recovery;
  NumericsConfig numerics;
  std::uint64_t seed = 0;
  TransportKind transport = TransportKind::Auto;
  std::string load_path;            // start from these weights (safetensors)
  Resources resources;
  TlsConfig tls;
  // A program's own model (layer factories with split points and ties); when it has layers it is
  // trained instead of the zoo model named in `model`. Serialised by its names, not its code.
  std::optional<partition::ModelDescription> program_model;
  // A program's own data set; when set it is read instead of the one `data.dataset` names.
  std::optional<ProgramDataset> program_data;
};

// The job's identity: everything but the resources and the program model's code. Enums are
// written by their names (pipewright/enums.h), shapes as "CxHxW", byte sizes as numbers.
nlohmann::json to_json(const JobConfig& config);

// The whole config (identity, resources and TLS files) as `--config FILE` reads it and `--print-config` writes it.
nlohmann::json to_full_json(const JobConfig& config);

// A config from its JSON form (either of the above; missing fields keep their defaults). A bad
// field is a ConfigError naming it by its path: "/pipeline/schedule: unknown schedule 'x'; accepted: ...".
JobConfig job_config_from_json(const nlohmann::json& j);

// A field of the config that holds a value it cannot take.
class ConfigError : public InputError {
 public:
  ConfigError(std::string path, const std::string& problem)
      : InputError(path + ": " + problem), path_(std::move(path)), problem_(problem) {}
  const std::string& path() const { return path_; }         // "/optimizer/lr"
  const std::string& problem() const { return problem_; }   // "-1; must be >= 0"

 private:
  std::string path_, problem_;
};

// Checks every field's range and the fields that go together; ConfigError naming the first bad one.
void validate(const JobConfig& config);
}  // namespace pw::train
