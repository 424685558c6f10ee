#include "kernels/host_ledger.h"

#include <mutex>
#include <unordered_map>

namespace pw::kernels {
namespace {

struct Ledger {
  std::mutex mutex;
  std::unordered_map<Device, MemoryStats> by_owner;
};

Ledger& ledger() {
  static Ledger* instance = new Ledger();   // never destroyed: host tensors may outlive static teardown
  return *instance;
}

}  // namespace

MemoryStats host_memory_stats(Device owner) {
  auto& l = ledger();
  std::lock_guard lock(l.mutex);
  const auto it = l.by_owner.find(owner);
  return it == l.by_owner.end() ? MemoryStats{} : it->second;
}

void reset_host_memory_peak(Device owner) {
  auto& l = ledger();
  std::lock_guard lock(l.mutex);
  auto& s = l.by_owner[owner];
  s.peak_in_use = s.in_use;
  s.peak_by_kind = s.in_use_by_kind;
}

namespace detail {

void count_host_allocation(Device owner, MemoryKind kind, std::int64_t bytes) {
  auto& l = ledger();
  std::lock_guard lock(l.mutex);
  auto& s = l.by_owner[owner];
  s.in_use += bytes;
  s.reserved += bytes;
  s.in_use_by_kind[static_cast<std::size_t>(kind)] += bytes;
  ++s.allocations;
  if (s.in_use > s.peak_in_use) {
    s.peak_in_use = s.in_use;
    s.peak_by_kind = s.in_use_by_kind;
  }
}

void count_host_release(Device owner, MemoryKind kind, std::int64_t bytes) {
  auto& l = ledger();
  std::lock_guard lock(l.mutex);
  auto& s = l.by_owner[owner];
  s.in_use -= bytes;
  s.reserved -= bytes;
  s.in_use_by_kind[static_cast<std::size_t>(kind)] -= bytes;
}

}  // namespace detail
}  // namespace pw::kernels
