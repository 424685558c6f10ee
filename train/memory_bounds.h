#pragma once
// Refuses, before anything is allocated, a job whose data set or batch could never fit in this
// host's memory: Linux overcommits, so such a job would otherwise start, allocate terabytes
// "successfully" and then thrash or be killed long after the mistake was made.
#include <cstdint>

#include "train/job_plan.h"

namespace pw::train {

// ConfigError naming /data/synthetic_size or /data/batch_size, with what is needed, what the host
// has and the largest value that fits. `host_bytes` is the host's physical memory (0: unknown,
// nothing is checked). Only lower bounds are checked, so a job refused here could never run.
void check_host_memory(const JobPlan& plan, std::int64_t host_bytes);

}  // namespace pw::train
