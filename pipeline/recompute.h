#pragma once
// Activation recomputation (GPipe's re-materialisation): a stage that recomputes keeps only its
// input per micro-batch in flight and re-runs the forward just before the backward.
#include <string>

namespace pw::pipeline {

enum class RecomputeMode { None, All, ExceptLast };

// "none", "all", "except-last"; anything else is an InputError listing them.
RecomputeMode parse_recompute_mode(const std::string& name);
std::string recompute_mode_name(RecomputeMode mode);
// ExceptLast leaves the last stage alone: it runs each backward right after its forward anyway.
bool stage_recomputes(RecomputeMode mode, int stage, int stages);

}  // namespace pw::pipeline
