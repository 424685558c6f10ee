// A CUDA injection library (CUDA_INJECTION64_PATH=libpw_cuda_kernel_profile.so) that records what a
// CUDA program does, through CUPTI's activity API: each kernel's and copy's GPU time, and each
// runtime and driver API call's host time, summed by name. At exit it writes one JSON object to
// $PW_KERNEL_PROFILE_OUT (stderr when unset):
//
//   {"gpu_busy_ns", "span_ns", "kernels": [{"name", "count", "total_ns"}], "copies": [...],
//    "runtime_api": [...], "driver_api": [...]}
//
// gpu_busy_ns is the union of the kernel, copy and memset intervals (overlaps counted once); span_ns
// runs from the first to the last of them. Two runs of one job that differ only in their step
// count give, by difference, the cost of one steady step (gpu_check.sh's kernel_profile step).
// It needs no GPU support of its own beyond CUPTI, which the GPU machine's CUDA toolkit brings.
#include <cupti.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

struct Total {
  double ns = 0.0;
  std::int64_t count = 0;
};

struct Record {
  std::mutex mutex;
  std::map<std::string, Total> kernels, copies, runtime_api, driver_api;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> intervals;   // GPU [start, end)
};

Record& record() {
  static Record* r = new Record();   // never destroyed: CUPTI may deliver buffers during exit
  return *r;
}

constexpr std::size_t kBufferBytes = 8u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void add(std::map<std::string, Total>& to, const std::string& name, double ns) {
  Total& t = to[name];
  t.ns += ns;
  ++t.count;
}

const char* copy_kind(std::uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "host to device";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "device to host";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "device to device";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "host to host";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "peer to peer";
    default: return "other copy";
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Record& r = record();
  std::lock_guard lock(r.mutex);
  CUpti_Activity* a = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
    switch (a->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel9*>(a);
        add(r.kernels, k->name != nullptr ? k->name : "(unnamed)", static_cast<double>(k->end - k->start));
        r.intervals.emplace_back(k->start, k->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy5*>(a);
        add(r.copies, std::string(copy_kind(m->copyKind)) + (m->bytes >= (1u << 20) ? ", 1 MiB or more" : ", under 1 MiB"),
            static_cast<double>(m->end - m->start));
        r.intervals.emplace_back(m->start, m->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(a);
        add(r.copies, "memset", static_cast<double>(m->end - m->start));
        r.intervals.emplace_back(m->start, m->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* c = reinterpret_cast<const CUpti_ActivityAPI*>(a);
        const bool runtime = a->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
        const char* name = nullptr;
        cuptiGetCallbackName(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, c->cbid, &name);
        add(runtime ? r.runtime_api : r.driver_api, name != nullptr ? name : "(unknown)",
            static_cast<double>(c->end - c->start));
        break;
      }
      default: break;
    }
  }
  std::free(buffer);
}

nlohmann::json totals(const std::map<std::string, Total>& m) {
  std::vector<std::pair<std::string, Total>> v(m.begin(), m.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, t] : v) out.push_back({{"name", name}, {"count", t.count}, {"total_ns", t.ns}});
  return out;
}

void write_summary() {
  cuptiActivityFlushAll(1);
  Record& r = record();
  std::lock_guard lock(r.mutex);
  std::sort(r.intervals.begin(), r.intervals.end());
  double busy = 0.0;
  std::uint64_t first = 0, last = 0, open_start = 0, open_end = 0;
  bool open = false;
  for (const auto& [s, e] : r.intervals) {
    if (!open) {
      first = s;
      open_start = s;
      open_end = e;
      open = true;
    } else if (s > open_end) {
      busy += static_cast<double>(open_end - open_start);
      open_start = s;
      open_end = e;
    } else {
      open_end = std::max(open_end, e);
    }
    last = std::max(last, e);
  }
  if (open) busy += static_cast<double>(open_end - open_start);
  const nlohmann::json j = {{"gpu_busy_ns", busy},
                            {"span_ns", static_cast<double>(last - first)},
                            {"kernels", totals(r.kernels)},
                            {"copies", totals(r.copies)},
                            {"runtime_api", totals(r.runtime_api)},
                            {"driver_api", totals(r.driver_api)}};
  const char* path = std::getenv("PW_KERNEL_PROFILE_OUT");   // a profiling tool, not library code
  if (path != nullptr && *path != '\0') {
    std::ofstream f(path);
    f << j.dump() << "\n";
    if (f) return;
    std::fprintf(stderr, "pw_cuda_kernel_profile: cannot write %s; the summary follows on stderr\n", path);
  }
  std::fprintf(stderr, "%s\n", j.dump().c_str());
}

bool enable(CUpti_ActivityKind kind, const char* what) {
  const CUptiResult st = cuptiActivityEnable(kind);
  if (st == CUPTI_SUCCESS) return true;
  const char* text = nullptr;
  cuptiGetResultString(st, &text);
  std::fprintf(stderr, "pw_cuda_kernel_profile: cannot record %s: %s\n", what, text != nullptr ? text : "?");
  return false;
}

}  // namespace

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library; 1 = initialised.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "pw_cuda_kernel_profile: CUPTI refused its activity callbacks; nothing is recorded\n");
    return 0;
  }
  enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "kernels");
  enable(CUPTI_ACTIVITY_KIND_MEMCPY, "copies");
  enable(CUPTI_ACTIVITY_KIND_MEMSET, "memsets");
  enable(CUPTI_ACTIVITY_KIND_RUNTIME, "runtime API calls");
  enable(CUPTI_ACTIVITY_KIND_DRIVER, "driver API calls");
  std::atexit(write_summary);
  return 1;
}
