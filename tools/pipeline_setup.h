#pragma once
// What the embedded and the multi-process pipeline backends of `pipewright train` share: the
// schedule, the devices and the split, all read from the train flags.
#include <vector>

#include "kernels/device.h"
#include "partition/model_description.h"
#include "pipeline/schedule.h"
#include "tools/train_command.h"

namespace pw::tools {

// One device per stage from --devices, else cpu:0..P-1 (or the GPUs in turn for --device cuda).
std::vector<kernels::Device> parse_devices(const TrainOptions& o, int stages);
// --stages defaults to the pieces --split makes (over --chunks), --micro-batches to one per stage.
pipeline::ScheduleSpec schedule_of(const TrainOptions& o);
// Checks stage count, split points and batch divisibility before anything is built.
void check_pipeline_flags(const TrainOptions& o, const partition::ModelDescription& model,
                          const pipeline::ScheduleSpec& spec);
// The split for --split or --partition; the profile method measures every layer on `profile_on`.
partition::Partition split_for(const TrainOptions& o, const partition::ModelDescription& model,
                               const pipeline::ScheduleSpec& spec, kernels::Device profile_on);

// --bucket-size in bytes (positive); InputError naming the flag otherwise.
std::size_t bucket_bytes_of(const TrainOptions& o);

}  // namespace pw::tools
