#pragma once
// The loop of one rank (pipewright/fit.h has run_job, FitOptions and the callbacks): reads its
// part of each global batch, steps, and at the end saves, evaluates and summarises.
#include <nlohmann/json.hpp>

#include "pipewright/fit.h"
#include "train/engine.h"

namespace pw::train {

// One rank's whole job on its engine. Returns the summary on rank 0 (an empty object elsewhere).
nlohmann::json fit(Engine& engine, const FitOptions& options, const FitCallbacks& callbacks = {});

}  // namespace pw::train
