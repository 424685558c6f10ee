#pragma once
// A JobConfig resolved into what the ranks build: the model description, its objective, the
// schedule, the optimizer, the gradient buckets, the data's shape. Every rank computes the same
// plan from the same config; only the split (which may be profiled) is chosen once, by rank 0.
// A plan is a value: making one starts nothing and writes nothing (a JobSession, job_session.h,
// opens what it needs).
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dataparallel/bucket_reducer.h"
#include "kernels/device.h"
#include "models/data/dataset.h"
#include "models/precision.h"
#include "models/optimizer.h"
#include "models/zoo/model_spec.h"
#include "partition/model_description.h"
#include "partition/cost_model.h"
#include "pipeline/planner.h"
#include "pipeline/recompute.h"
#include "pipeline/schedule.h"
#include "train/job_config.h"
#include "train/world.h"

namespace pw::train {

struct DataShape {
  std::string name;
  kernels::Shape sample_shape;
  int num_classes = 0;
};

struct JobPlan {
  JobConfig config;
  DataShape data;
  partition::ModelDescription model;
  models::Objective objective = models::Objective::SoftmaxCrossEntropy;
  models::ModelStats stats;
  pipeline::ScheduleSpec schedule;
  // One program per stage from --schedule-file; empty: each stage's default program.
  std::vector<std::vector<pipeline::Instruction>> programs;
  pipeline::RecomputeMode recompute = pipeline::RecomputeMode::None;
  partition::RecomputeStages recompute_stages;   // one per stage when chosen per stage (overrides recompute)
  std::set<std::string> recompute_layers;         // selective recomputation: layers of the model, by name
  models::OptimizerConfig optimizer;
  models::Precision precision = models::Precision::Fp32;
  dp::BucketOptions buckets;
  // The model's embedding tables on parameter servers (empty: the job has no servers).
  std::vector<std::string> server_tables;

  int replicas() const { return config.replicas.replicas; }
  WorldShape shape() const { return {schedule.stages, config.replicas.replicas}; }
  // Micro-batches per global batch, over every replica: evaluation batches are this fraction.
  int eval_fraction() const { return schedule.micro_batches * replicas(); }

  // What stage `stage` runs: All or None when chosen per stage, else the job-wide mode.
  pipeline::RecomputeMode recompute_of(int stage) const;

  bool uses_parameter_servers() const { return !server_tables.empty(); }
};

// Equal plans run the same job: the same config (in its full JSON form), model layers, resolved
// schedule and programs, data shape and server tables.
bool operator==(const JobPlan& a, const JobPlan& b);

// Checks the config (ConfigError naming the field, InputError for what the data says) and
// resolves it, with no side effects (it reads the data set's header for its shape).
JobPlan plan_job(const JobConfig& config);

// The shape and classes of the data set without reading it.
DataShape data_shape(const JobConfig& config);
// The data set's options (click features, synthetic shape) for `parts` of it.
models::data::DatasetOptions dataset_options(const JobConfig& config, models::data::DataParts parts);
// The job's data set for `split`: the program's own (JobConfig::program_data) or the one
// /data/dataset names, opening only the files `parts` needs (and recording skipped bad samples in
// `bad_samples`, when given; a program's set handles its own).
std::unique_ptr<models::data::Dataset> open_job_dataset(
    const JobConfig& config, models::data::Split split, models::data::DataParts parts,
    const std::shared_ptr<models::data::BadSampleLog>& bad_samples = nullptr);

// The device of `rank`: its entry of the devices list, else cpu:<rank> for ranks as threads
// (cpu:0 for a process), or a GPU in turn (the local rank's for a process).
kernels::Device device_of_rank(const JobConfig& config, int rank, int world_size, WorldKind world, int local_rank);
// Checks the devices list against the world and the machine's GPUs.
void check_devices(const JobConfig& config, int world_size);

// The split for the config's split points or partition method; the profile method measures
// every layer on `profile_on`.
partition::Partition choose_split(const JobPlan& plan, kernels::Device profile_on);
// What choose_split (and the planner) decide the split from: the split points given (the config's,
// else the model's own) or the partition method, and the partitioner's cost model of the job.
pipeline::SplitChoice split_choice_of(const JobPlan& plan);
partition::CostModel cost_model_of(const JobPlan& plan);

// "1f1b" etc. with its default chunk count resolved (2 for interleaved).
pipeline::ScheduleSpec schedule_of(const PipelineConfig& p, int model_split_pieces);

}  // namespace pw::train
