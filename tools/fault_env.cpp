// PW_INJECT_FAULT and PW_INJECT_STEP_DELAY, read once as the program starts, become the engine's
// fault hooks (train/fault_injection.h).
#include "tools/fault_env.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "rpc/launch_env.h"
#include "train/fault_injection.h"

namespace pw::tools {
namespace {

using train::FaultKind;

struct Entry {
  FaultKind kind;
  std::int64_t step;
  int rank;
  int attempt;
  bool fired = false;
};

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
      else if (kind == "stall") e.kind = FaultKind::Stall;
      else if (kind == "disk-full") e.kind = FaultKind::DiskFull;
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
    PW_INPUT_CHECK(ok, kInjectFaultEnv << ": '" << item << "' is not KIND@STEP:RANK[/ATTEMPT] with KIND nonfinite-grad, "
                                       << "sigkill, stall or disk-full, STEP >= 1, e.g. nonfinite-grad@5:0");
    out.push_back(e);
  }
  return out;
}

std::map<int, std::chrono::milliseconds> parse_delays(const std::string& text) {
  std::stringstream list(text);
  std::string item;
  std::map<int, std::chrono::milliseconds> delays;
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
    delays[entry_rank] = std::chrono::milliseconds(ms);
  }
  return delays;
}


}  // namespace

void install_fault_hooks_from_environment() {
  train::FaultHooks hooks;
  if (const char* text = std::getenv(kInjectFaultEnv); text != nullptr && *text != '\0') {
    // Each entry fires once per process, in the attempt (restart count) it names.
    struct Fired {
      std::mutex mutex;
      std::vector<Entry> entries;
    };
    auto state = std::make_shared<Fired>();
    state->entries = parse(text);
    const int attempt = rpc::restart_env().count;
    hooks.fault = [state, attempt](FaultKind kind, std::int64_t step, int rank) {
      std::lock_guard lock(state->mutex);
      for (auto& e : state->entries)
        if (!e.fired && e.kind == kind && e.step == step && e.rank == rank && e.attempt == attempt) {
          e.fired = true;
          return true;
        }
      return false;
    };
  }
  if (const char* text = std::getenv(kInjectStepDelayEnv); text != nullptr && *text != '\0') {
    auto delays = std::make_shared<const std::map<int, std::chrono::milliseconds>>(parse_delays(text));
    hooks.step_delay = [delays](int rank) {
      const auto it = delays->find(rank);
      return it == delays->end() ? std::chrono::milliseconds(0) : it->second;
    };
  }
  train::set_fault_hooks(std::move(hooks));
}

}  // namespace pw::tools
