#include "pipeline/recompute.h"

namespace pw::pipeline {

bool stage_recomputes(RecomputeMode mode, int stage, int stages) {
  switch (mode) {
    case RecomputeMode::None: return false;
    case RecomputeMode::All: return true;
    case RecomputeMode::ExceptLast: return stage != stages - 1;
  }
  return false;
}

}  // namespace pw::pipeline
