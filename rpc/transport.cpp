#include "rpc/transport.h"

#include <sstream>

namespace pw::rpc {

std::string payload_kind_name(PayloadKind kind) {
  switch (kind) {
    case PayloadKind::Activation: return "activation";
    case PayloadKind::Gradient: return "gradient";
    case PayloadKind::TiedGradient: return "tied-weight gradient";
    case PayloadKind::Evaluation: return "evaluation activation";
    case PayloadKind::Control: return "control message";
    case PayloadKind::Collective: return "collective message";
  }
  return "?";
}

std::string tag_str(const Tag& tag) {
  std::ostringstream out;
  if (tag.kind == PayloadKind::TiedGradient) {
    out << "tied-weight gradient of group " << tag.micro_batch << " from stage " << tag.virtual_stage;
  } else if (tag.kind == PayloadKind::Control) {
    out << "control message " << tag.micro_batch;
  } else if (tag.kind == PayloadKind::Collective) {
    out << "collective message " << tag.micro_batch << " of group " << tag.virtual_stage << "'s operation " << tag.step;
    return out.str();
  } else {
    out << payload_kind_name(tag.kind) << " of micro-batch " << tag.micro_batch << " for virtual stage "
        << tag.virtual_stage;
  }
  out << " (step " << tag.step << ")";
  return out.str();
}

}  // namespace pw::rpc
