#include "train/fault_injection.h"

#include <csignal>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "rpc/launch_env.h"

namespace pw::train {
namespace {

struct Entry {
  FaultKind kind;
  std::int64_t step;
  int rank;
  int attempt;
  bool fired = false;
};

int restart_count() { return rpc::restart_env().count; }

std::vector<Entry> parse(const std::string& text) {
  std::vector<Entry> out;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (item.empty()) continue;
    const auto at = item.find('@'), colon = item.find(':'), slash = item.find('/');
    bool ok = at != std::string::npos && colon != std::string::npos && colon > at;
    Entry e{FaultKind::Kill, 0, 0, 0};
    if (ok) {
      const auto kind = item.substr(0, at);
      if (kind == "nonfinite-grad") e.kind = FaultKind::NonfiniteGradient;
      else if (kind == "sigkill") e.kind = FaultKind::Kill;
      else ok = false;
      try {
        std::size_t used = 0;
        e.step = std::stoll(item.substr(at + 1, colon - at - 1), &used);
        ok = ok && used == colon - at - 1 && e.step >= 1;
        const auto rank_end = slash == std::string::npos ? item.size() : slash;
        e.rank = std::stoi(item.substr(colon + 1, rank_end - colon - 1), &used);
        ok = ok && used == rank_end - colon - 1 && e.rank >= 0;
        if (slash != std::string::npos) {
          e.attempt = std::stoi(item.substr(slash + 1), &used);
          ok = ok && used == item.size() - slash - 1 && e.attempt >= 0;
        }
      } catch (const std::exception&) {
        ok = false;
      }
    }
    PW_INPUT_CHECK(ok, kInjectFaultEnv << ": '" << item << "' is not KIND@STEP:RANK[/ATTEMPT] with KIND nonfinite-grad "
                                       << "or sigkill, STEP >= 1, e.g. nonfinite-grad@5:0");
    out.push_back(e);
  }
  return out;
}

std::mutex& entries_mutex() {
  static std::mutex m;
  return m;
}

std::vector<Entry>& entries() {
  static std::vector<Entry> parsed = [] {
    const char* text = std::getenv(kInjectFaultEnv);
    return text ? parse(text) : std::vector<Entry>{};
  }();
  return parsed;
}

}  // namespace

bool injected_fault(FaultKind kind, std::int64_t step, int rank) {
  std::lock_guard<std::mutex> lock(entries_mutex());
  const int attempt = restart_count();
  for (auto& e : entries())
    if (!e.fired && e.kind == kind && e.step == step && e.rank == rank && e.attempt == attempt) {
      e.fired = true;
      return true;
    }
  return false;
}

void maybe_kill_at(std::int64_t step, int rank) {
  if (injected_fault(FaultKind::Kill, step, rank)) std::raise(SIGKILL);
}

std::chrono::milliseconds injected_step_delay(int rank) {
  const char* text = std::getenv(kInjectStepDelayEnv);
  if (text == nullptr) return std::chrono::milliseconds(0);
  std::stringstream list(text);
  std::string item;
  std::chrono::milliseconds delay(0);
  while (std::getline(list, item, ',')) {
    if (item.empty()) continue;
    const auto colon = item.find(':');
    bool ok = colon != std::string::npos;
    int entry_rank = 0;
    long long ms = 0;
    if (ok) {
      try {
        std::size_t used = 0;
        entry_rank = std::stoi(item.substr(0, colon), &used);
        ok = used == colon && entry_rank >= 0;
        ms = std::stoll(item.substr(colon + 1), &used);
        ok = ok && used == item.size() - colon - 1 && ms >= 0 && ms <= 600000;
      } catch (const std::exception&) {
        ok = false;
      }
    }
    PW_INPUT_CHECK(ok, kInjectStepDelayEnv << ": '" << item << "' is not RANK:MS with RANK >= 0 and MS from 0 to "
                                           << "600000, e.g. 1:50");
    if (entry_rank == rank) delay = std::chrono::milliseconds(ms);
  }
  return delay;
}

}  // namespace pw::train
