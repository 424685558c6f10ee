#include "pipeline/recompute.h"

#include "core/error.h"

namespace pw::pipeline {

RecomputeMode parse_recompute_mode(const std::string& name) {
  if (name == "none") return RecomputeMode::None;
  if (name == "all") return RecomputeMode::All;
  if (name == "except-last") return RecomputeMode::ExceptLast;
  throw InputError("unknown --recompute '" + name + "'; accepted: none, all, except-last");
}

std::string recompute_mode_name(RecomputeMode mode) {
  switch (mode) {
    case RecomputeMode::None: return "none";
    case RecomputeMode::All: return "all";
    case RecomputeMode::ExceptLast: return "except-last";
  }
  return "?";
}

bool stage_recomputes(RecomputeMode mode, int stage, int stages) {
  switch (mode) {
    case RecomputeMode::None: return false;
    case RecomputeMode::All: return true;
    case RecomputeMode::ExceptLast: return stage != stages - 1;
  }
  return false;
}

}  // namespace pw::pipeline
