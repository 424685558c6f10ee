#include "pipeline/update_check.h"

namespace pw::pipeline {

bool post_validates(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::ZeroBubbleH1:
    case ScheduleKind::ZeroBubbleH2:
    case ScheduleKind::ZeroBubbleV:
    case ScheduleKind::VHalf:
    case ScheduleKind::VMin:
    case ScheduleKind::InterleavedZeroBubble:
    case ScheduleKind::DualPipeV: return true;
    case ScheduleKind::GPipe:
    case ScheduleKind::OneFOneB:
    case ScheduleKind::Interleaved: return false;
  }
  return false;
}

UpdateValidation resolve_update_validation(UpdateValidation chosen, ScheduleKind kind,
                                           models::OptimizerOffload offload) {
  if (chosen != UpdateValidation::Auto) return chosen;
  return post_validates(kind) && offload != models::OptimizerOffload::Host ? UpdateValidation::After
                                                                           : UpdateValidation::Before;
}

}  // namespace pw::pipeline
