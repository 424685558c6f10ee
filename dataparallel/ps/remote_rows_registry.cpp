#include "dataparallel/ps/remote_rows_registry.h"

#include <cmath>

#include "core/error.h"
#include "dataparallel/ps/replica_rows_norm.h"

namespace pw::dp {
namespace {

thread_local RemoteRowsRegistry* building_registry = nullptr;

}  // namespace

RemoteRowsRegistry::RemoteRowsRegistry(int worker) : worker_(worker) {
  PW_CHECK(worker >= 0, "remote rows of worker " << worker << "; expected a replica index >= 0");
}

RemoteRowsRegistry::BuildScope::BuildScope(RemoteRowsRegistry& registry) : previous_(building_registry) {
  building_registry = &registry;
}

RemoteRowsRegistry::BuildScope::~BuildScope() { building_registry = previous_; }

RemoteRowsRegistry* RemoteRowsRegistry::building() { return building_registry; }

void RemoteRowsRegistry::add(RemoteRows& rows, IdsFromModelInput ids) {
  rows.set_worker(worker_);
  entries_.push_back({&rows, std::move(ids)});
}

void RemoteRowsRegistry::reconnect() {
  for (auto& e : entries_) e.rows->reconnect();
}

void RemoteRowsRegistry::abort(const std::string& why) noexcept {
  for (auto& e : entries_) e.rows->abort(why);
}

double RemoteRowsRegistry::gradient_sum_of_squares() {
  double own = 0.0;
  for (const auto& e : entries_) own += e.rows->gradient_sum_of_squares();
  if (!exchange_ || entries_.empty()) return own;
  std::vector<PendingRows> mine;
  mine.reserve(entries_.size());
  for (const auto& e : entries_) mine.push_back(e.rows->pending_rows());
  const auto all = exchange_(mine);   // every replica takes part, finite or not
  if (!std::isfinite(own)) return own;
  // A replica whose gradients are not finite says so itself; this one reports its own, finite.
  const double summed = sum_of_squares_over_replicas(all);
  return std::isfinite(summed) ? summed : own;
}

void RemoteRowsRegistry::scale_gradients(double factor) {
  for (auto& e : entries_) e.rows->scale_gradients(factor);
}

void RemoteRowsRegistry::finish_step(RemoteGradients what) {
  for (auto& e : entries_) e.rows->push_gradients(worker_, what);
}

void RemoteRowsRegistry::prefetch(const std::vector<kernels::Tensor>& next_micro_batches) {
  for (auto& e : entries_) {
    if (!e.ids) continue;
    std::vector<kernels::Tensor> ids;
    ids.reserve(next_micro_batches.size());
    for (const auto& x : next_micro_batches) ids.push_back(e.ids(x));
    e.rows->prefetch(ids);
  }
}

void RemoteRowsRegistry::flush() {
  for (auto& e : entries_) e.rows->flush();
}

}  // namespace pw::dp
