#include "dataparallel/ps/remote_rows_registry.h"

#include "core/error.h"

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

double RemoteRowsRegistry::gradient_sum_of_squares() {
  double sum = 0.0;
  for (const auto& e : entries_) sum += e.rows->gradient_sum_of_squares();
  return sum;
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
