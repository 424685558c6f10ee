#pragma once
// Activation recomputation (GPipe's re-materialisation): a stage that recomputes keeps only its
// input per micro-batch in flight and re-runs the forward just before the backward. The modes
// are the partitioner's (partition/cost_model.h), which budgets memory for them.
#include "partition/cost_model.h"

namespace pw::pipeline {

using RecomputeMode = partition::Recompute;

// ExceptLast leaves the last stage alone: it runs each backward right after its forward anyway.
bool stage_recomputes(RecomputeMode mode, int stage, int stages);

}  // namespace pw::pipeline
