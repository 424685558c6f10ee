#include "partition/profile_partitioner.h"

#include <sstream>

#include "core/error.h"
#include "core/units.h"
#include "partition/min_max_split.h"

namespace pw::partition {
namespace {

std::string gib(std::int64_t bytes) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(2);
  out << static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return out.str();
}

// Bytes in the unit a person reading `reference` expects (GiB caps get GiB overshoots).
std::string bytes_like(std::int64_t bytes, std::int64_t reference) {
  return reference >= (std::int64_t{1} << 30) ? gib(bytes) : format_bytes(bytes);
}

[[noreturn]] void throw_no_fit(const std::vector<LayerProfile>& layers, const CostModel& cost, const std::string& model_name) {
  // The split that misses by least: minimise the largest amount any piece is over its cap.
  const auto least_over = min_max_split(static_cast<int>(layers.size()), cost.pieces(), [&](int piece, int begin, int end) {
    const auto e = estimate_piece(layers, cost, piece, {begin, end});
    return e.memory_cap == 0 ? -1e300 : static_cast<double>(e.memory_bytes - e.memory_cap);
  });
  const auto pieces = estimate_stages(layers, cost, least_over.partition);
  const StageEstimate* worst = &pieces.front();
  for (const auto& p : pieces) {
    if (p.memory_bytes - p.memory_cap > worst->memory_bytes - worst->memory_cap) worst = &p;
  }
  const std::int64_t cap = cost.memory_cap(worst->device);
  std::ostringstream out;
  out << "no split of " << model_name << " into " << cost.stages << " stages";
  if (cost.chunks > 1) out << " of " << cost.chunks << " chunks";
  out << " fits a " << bytes_like(cap, cap) << " cap: the best puts " << bytes_like(worst->memory_bytes, cap)
      << " on stage " << worst->device;
  if (cost.chunks > 1) out << " chunk " << worst->chunk << " (its share " << bytes_like(worst->memory_cap, cap) << ")";
  out << " (" << bytes_like(worst->memory_bytes - worst->memory_cap, cap) << " over";
  if (worst->weight_bytes > worst->memory_cap) {
    out << "; its weights, gradients and optimizer state alone take " << bytes_like(worst->weight_bytes, cap)
        << "); use more stages or a larger memory cap";
  } else {
    out << "); use more stages, a larger memory cap, more (smaller) micro-batches";
    out << (cost.recompute == Recompute::All ? "" : " or recompute all");
  }
  throw InputError(out.str());
}

}  // namespace

Partition partition_by_profile(const std::vector<LayerProfile>& layers, const CostModel& cost, const std::string& model_name) {
  const int n = static_cast<int>(layers.size());
  PW_INPUT_CHECK(cost.pieces() <= n, model_name << " has only " << n << " layers, fewer than the " << cost.pieces()
                                                << " pieces of " << cost.stages << " stages x " << cost.chunks << " chunks");
  const auto best = min_max_split(n, cost.pieces(), [&](int piece, int begin, int end) {
    const auto e = estimate_piece(layers, cost, piece, {begin, end});
    return e.fits() ? e.step_seconds : kInfeasible;
  });
  if (best.partition.empty()) throw_no_fit(layers, cost, model_name);
  return best.partition;
}

}  // namespace pw::partition
