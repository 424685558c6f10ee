#pragma once
// Refuses, before anything is allocated, a job whose model, data set or batch could never fit in
// this host's memory: Linux overcommits, so such a job would otherwise start, allocate terabytes
// "successfully" and then thrash or be killed long after the mistake was made.
#include <cstdint>
#include <string>

#include "train/job_plan.h"

namespace pw::train {

// The memory a job in this process could ever hold: the host's physical memory, or less where this
// process is limited to less (its address space or data limit, ulimit -v / -d, or its control
// group's memory.max).
struct HostMemory {
  std::int64_t bytes = 0;   // 0: unknown, nothing is checked
  std::string what;         // how messages name it: "this host's 23.4 GiB of memory"
};
// `physical_bytes` (host_memory_bytes(); 0: unknown) as the host's memory.
HostMemory physical_memory(std::int64_t physical_bytes);
// The lowest of `physical_bytes` and this process's limits.
HostMemory host_memory_limit(std::int64_t physical_bytes);

// The model's weights, gradients and optimizer state on the busiest stage, from the layers'
// parameter counts (LayerSpec::parameters, no layer built): on CPU devices all of it is host
// memory; on GPUs only an offloaded optimizer state is (the device side is not checked here). A
// ConfigError naming the field the size comes from (/model/width, /model/embedding_rows, the input
// shape), with what it needs and what the host has. Needs the plan's model, schedule, optimizer
// and precision; plan_job calls it before it builds any layer.
void check_model_memory(const JobPlan& plan, const HostMemory& host);

// ConfigError naming /data/synthetic_size or /data/batch_size, with what is needed, what the host
// has and the largest value that fits. `host_bytes` is the host's physical memory (0: unknown,
// nothing is checked). Only lower bounds are checked, so a job refused here could never run.
void check_host_memory(const JobPlan& plan, std::int64_t host_bytes);
void check_host_memory(const JobPlan& plan, const HostMemory& host);

}  // namespace pw::train
