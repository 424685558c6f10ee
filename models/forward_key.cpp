#include "models/forward_key.h"

namespace pw::models {
namespace {
thread_local std::optional<std::uint64_t> t_key;
}

std::optional<std::uint64_t> current_forward_key() { return t_key; }

ForwardKeyGuard::ForwardKeyGuard(std::uint64_t key) : previous_(t_key) { t_key = key; }
ForwardKeyGuard::~ForwardKeyGuard() { t_key = previous_; }

}  // namespace pw::models
