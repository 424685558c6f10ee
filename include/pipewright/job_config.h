#pragma once
// Everything that defines a training job, as plain structs: the model (a zoo name, or a program's
// own layer list with split points and ties), the data, the pipeline's shape and schedule, the
// replicas, the parameter servers, the optimizer and the timeouts. It serialises to JSON; the
// ranks of a job prove they run the same job by comparing a hash of that JSON. Where each rank
// runs (devices, threads, memory caps) and what it writes (summary, weights, trace) are local to a
// process and sit outside the hash.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipewright/model.h"

namespace pw::train {

struct ModelConfig {
  std::string name = "seed-cnn";   // a zoo model; ignored when JobConfig::program_model is set
  int width = 64;                  // ResNet base width / VGG width scale
  std::vector<std::int64_t> embedding_rows;   // dlrm: rows of each sparse feature's table
  int embedding_dim = 8;                      // dlrm: width of the embedding rows
};

struct DataConfig {
  std::string dataset = "fashion-mnist";   // fashion-mnist, synthetic or synthetic-clicks
  std::string synthetic_shape = "1x28x28";
  std::int64_t synthetic_size = 60000;
  std::int64_t batch_size = 64;   // the global batch, split over replicas and micro-batches
  std::int64_t epochs = 1;
  std::int64_t steps = -1;        // overrides epochs when > 0
  std::int64_t eval_batches = -1; // evaluate on at most this many test batches (-1: all)
};

struct PipelineConfig {
  int stages = 0;          // 0: from the split when given, else 1
  int micro_batches = 0;   // 0: one per stage
  std::string schedule = "1f1b";
  int chunks = 0;          // model chunks per stage; 0: 2 for interleaved, else 1
  std::vector<int> split;  // first layer of stages 1..P-1 (empty: the partition method or the model's own)
  std::string partition = "uniform";   // uniform, params or profile
  std::string recompute = "none";      // none, all or except-last
  std::string schedule_file;           // a program per stage in the text form (overrides schedule)
};

struct ReplicaConfig {
  int replicas = 1;
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  std::string grad_compression = "none";   // none, fp16 or bf16 (pre-divided by the replica count)
  bool sync_batch_norm = false;            // batch-norm statistics over every replica's samples
};

struct ParameterServerConfig {
  int servers = 0;                // run in this process as threads unless addresses are given
  std::string addresses;          // HOST:PORT,... of servers started elsewhere
  std::string mode = "sync";      // sync, async or bounded
  int staleness = 1;
  std::string optimizer;          // default: the dense optimizer
  double lr = 0.0;                // 0: the dense learning rate
  std::string dir;                // servers run here keep their shards in this folder
  // Bounded tables (dataparallel/ps_bounds.h): a row on an id's N-th sighting, at most max_rows
  // rows per table and shard (0: no cap), rows expire after row_ttl steps without an update (0: never).
  int admit_after = 1;
  std::int64_t max_rows = 0;
  std::int64_t row_ttl = 0;
};

struct OptimizerSettings {
  std::string kind = "adam";   // sgd, adam or adagrad
  double lr = 0.0;             // 0: the optimizer's default (adam 0.001, else 0.01)
  double momentum = 0.9;
  double weight_decay = 0.0;
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
  std::string on_error = "stop";    // stop or continue, when a checkpoint cannot be written
  std::string resume;               // a checkpoint folder, or a folder of them (the newest complete one)
};

// What a step whose loss or gradients are not finite does, and gradient clipping.
struct RecoveryConfig {
  int max_bad_steps = 3;             // consecutive skipped steps that roll back to the newest checkpoint
  double rollback_lr_factor = 0.5;   // the learning rate after a rollback, relative to before
  double clip_grad_norm = 0.0;       // clip by the norm of the whole model's gradient; 0: off
};

// Mixed precision (models/precision.h, train/loss_scaler.h), and how CUDA ops may trade exactness
// for speed or reproducibility (kernels/math_mode.h; CPU ops ignore those two).
struct NumericsConfig {
  std::string precision = "fp32";     // fp32, bf16 or fp16: activations, convolutions, matrix products
  double loss_scale = 0.0;            // fp16: 0 = dynamic loss scaling, > 0 a fixed scale
  double initial_loss_scale = 65536;  // fp16 dynamic: the first scale (2^16, as torch's GradScaler)
  int loss_scale_window = 2000;       // fp16 dynamic: steps without overflow before the scale doubles
  bool allow_tf32 = false;            // TF32 tensor-core math for fp32 convolutions and matrix products
  bool deterministic = false;         // only deterministic cuDNN algorithms and ordered gradient sums
};

// Where this process's ranks run: not part of the job's identity (ranks may differ).
struct Resources {
  std::string device = "cpu:0";      // cpu:N or cuda:N; a pipeline puts its stages on cpu:0..N-1 or the GPUs
  std::vector<std::string> devices;  // one per rank (replica-major), overriding `device`
  int threads = 0;                   // CPU threads per rank; 0: this machine's share
  std::string device_memory;         // cap per device, e.g. "512MiB"
  std::string data_dir;              // fashion-mnist files here; empty: $PW_FASHION_MNIST_DIR or the default
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
  std::string transport = "auto";   // auto, inprocess, thrift or nccl
  std::string load_path;            // start from these weights (safetensors)
  Resources resources;
  // A program's own model (layer factories with split points and ties); when it has layers it is
  // trained instead of the zoo model named in `model`. Serialised by its names, not its code.
  std::optional<partition::ModelDescription> program_model;
};

// The job's identity: everything but the resources and the program model's code.
nlohmann::json to_json(const JobConfig& config);
JobConfig job_config_from_json(const nlohmann::json& j);   // InputError naming a bad field
}  // namespace pw::train
