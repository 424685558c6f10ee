#pragma once
// `pipewright train`: the flags of a training job, mapped onto the engine's JobConfig.
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "train/job_config.h"

namespace pw::tools {

struct TrainOptions {
  std::string model = "seed-cnn";
  std::string dataset = "fashion-mnist";
  std::string data_dir;
  std::string synthetic_shape = "1x28x28";
  std::int64_t synthetic_size = 60000;
  int width = 64;
  std::int64_t epochs = 1;
  std::int64_t steps = -1;   // overrides epochs when set
  std::int64_t batch_size = 64;
  double lr = 0.0;   // 0: the optimizer's default (adam 0.001, sgd 0.01, adagrad 0.01)
  std::string optimizer = "adam";
  double momentum = 0.9;
  double weight_decay = 0.0;
  int threads = 0;   // 0: all hardware threads
  std::string device = "cpu:0";
  std::string device_memory;
  std::uint64_t seed = 0;
  std::string summary_path;
  std::string save_path;
  std::string load_path;
  // Long jobs: checkpoints, resume, recovery from non-finite steps.
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  double checkpoint_every_seconds = 0.0;
  int keep_checkpoints = 3;
  std::string on_checkpoint_error = "stop";
  std::string resume;
  int max_bad_steps = 3;
  double rollback_lr_factor = 0.5;
  double clip_grad_norm = 0.0;
  std::int64_t log_every = 50;
  std::int64_t eval_batches = -1;
  std::int64_t warmup_steps = 5;
  // Pipeline:
  int stages = 0;          // 0: from --split when given, else 1
  int micro_batches = 0;   // 0: one per stage
  std::string schedule = "1f1b";
  int chunks = 0;          // 0: 2 for interleaved, else 1
  std::string schedule_file;
  std::string devices;     // "cpu:0,cpu:1"; default cpu:0..P-1 (or the GPUs in turn)
  std::string split;       // "3,7,12"
  std::string partition = "uniform";
  std::string recompute = "none";
  double stage_timeout_seconds = 60.0;
  // Data parallelism: replicas of the pipeline, each stage averaging its gradients with its replicas.
  int replicas = 1;
  std::string bucket_size = "25MiB";
  std::string grad_compression = "none";   // none, fp16 or bf16
  std::string precision = "fp32";
  double loss_scale = 0.0;
  double initial_loss_scale = 65536;
  int loss_scale_window = 2000;
  bool sync_batch_norm = false;
  // CUDA numerics:
  bool allow_tf32 = false;
  bool deterministic = false;
  // Profiling: Chrome trace of steps [trace_first, trace_last).
  std::string trace_path;
  std::string trace_steps;   // "A:B"; empty: every step (the ring keeps the latest spans)
  // Multi-process jobs (started by `pipewright launch`, srun, mpirun or torchrun-style variables):
  std::string transport = "auto";          // auto, inprocess, thrift or nccl
  double heartbeat_timeout_seconds = 5.0;  // a rank silent this long (or whose process died) ends the job
  double startup_timeout_seconds = 120.0;  // for every rank to register at the rendezvous
  // DLRM and its click data:
  std::vector<std::int64_t> embedding_rows;   // rows per sparse feature's table (default: the data set's)
  int embedding_dim = 8;
  // Parameter servers for the embedding tables (tools/ps_setup.h):
  int ps = 0;                       // servers; run here as threads unless addresses are given
  std::string ps_servers;           // HOST:PORT,... of servers started by hand (pipewright ps serve)
  std::string ps_mode = "sync";     // sync, async or bounded
  int staleness = 1;                // bounded: pulls of step t wait for step t - s
  std::string ps_optimizer;         // sgd, adagrad or adam on the servers (default: --optimizer)
  double ps_lr = 0.0;               // 0: --lr
  std::string ps_dir;               // servers run here keep their shards in this folder
  int ps_admit_after = 1;           // a row on an id's N-th sighting
  std::int64_t ps_max_rows = 0;     // rows per table and shard, least recently updated evicted (0: no cap)
  std::int64_t ps_row_ttl = 0;      // steps a row may go without an update (0: forever)
};

void add_train_command(CLI::App& app, TrainOptions& options);
// InputError naming the flag for a value the engine cannot take.
train::JobConfig job_config_of(const TrainOptions& options);
int run_train(const TrainOptions& options);

}  // namespace pw::tools
