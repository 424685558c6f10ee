#pragma once
// `pipewright plan --search`: ranks the layouts of a job that fit its devices (train/layout_search.h),
// prints the best few with their predicted step time and memory by kind, and writes the best as a
// job config that `pipewright train --config` runs.
#include "tools/plan_command.h"
#include "train/layout_prediction.h"

namespace pw::tools {

int run_plan_search(const PlanCommand& command, const train::JobConfig& job, const train::LinkSpeeds& links);

}  // namespace pw::tools
