#include "train/link_calibration.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <stop_token>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "dataparallel/gloo_collective.h"
#include "dataparallel/run_per_rank.h"
#include "kernels/tensor.h"
#include "rpc/in_process_transport.h"
#include "rpc/store.h"

namespace pw::train {
namespace {

// The mean of the middle half: the times after work are bimodal here (a one-float all-reduce took
// 0.25-0.45 ms or 1-5 ms, its two ranks starting within 0.1 ms of each other), so the median of a
// few flips between the modes from one plan to the next (0.18 to 1.04 ms a step in three plans).
double interquartile_mean(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t begin = v.size() / 4, end = std::max(begin + 1, v.size() - v.size() / 4);
  double sum = 0.0;
  for (std::size_t i = begin; i < end; ++i) sum += v[i];
  return sum / static_cast<double>(end - begin);
}

constexpr double kWorkBeforeEach = 5e-3;                    // seconds
constexpr std::size_t kScratchBytes = std::size_t{8} << 20;   // beyond a core's L2

// Memory-bound work for `seconds`, as a layer's: writes `scratch` over and over.
void work_for(double seconds, std::vector<char>& scratch) {
  const auto start = Clock::now();
  for (int k = 0; seconds_since(start) < seconds; ++k) std::memset(scratch.data(), k, scratch.size());
}

}  // namespace

MeasuredCollective measure_cpu_allreduce(int runs, std::int64_t large_bytes) {
  using namespace std::chrono_literals;
  PW_CHECK(runs >= 1 && large_bytes >= 4, "all-reduce calibration: " << runs << " runs of " << large_bytes << " bytes");
  rpc::InMemoryStore store;
  std::vector<std::unique_ptr<dp::GlooCollective>> group(2);
  dp::run_per_rank(2, [&](int r) {
    group[static_cast<std::size_t>(r)] = std::make_unique<dp::GlooCollective>(r, 2, store, "link-calibration/", "127.0.0.1", 30000ms);
  });
  // Both ranks loop on their own threads (an all-reduce waits for both); rank 0's clock times each.
  // After a stretch of work on both ranks, as a job's collectives follow its backward or its
  // update, a call pays for waking the ranks' threads and Gloo's: back to back, a one-float
  // all-reduce took about 0.1 ms here, after work 0.25-5 ms (and a 704 KiB one 0.6 ms back to back,
  // where resnet18's replicas waited 1.7-2.9 ms for theirs after each backward).
  enum class Before { Work, Nothing };
  const auto timed = [&](std::int64_t elements, Before before) {
    std::vector<kernels::Tensor> data{kernels::Tensor::full({elements}, 1.0), kernels::Tensor::full({elements}, 1.0)};
    std::vector<double> times;
    std::vector<std::vector<char>> scratch(2, std::vector<char>(kScratchBytes));
    dp::run_per_rank(2, [&](int r) {
      for (int i = 0; i <= runs; ++i) {
        if (before == Before::Work) work_for(kWorkBeforeEach, scratch[static_cast<std::size_t>(r)]);
        const auto t0 = Clock::now();
        group[static_cast<std::size_t>(r)]->allreduce_sum(data[static_cast<std::size_t>(r)], dp::Compression::None);
        if (r == 0 && i > 0) times.push_back(seconds_since(t0));   // the first warms up
      }
    });
    return interquartile_mean(times);
  };
  const double warm = timed(1, Before::Nothing);
  const double small = timed(1, Before::Work);
  const double large = timed(std::max<std::int64_t>(1, large_bytes / 4), Before::Work);
  MeasuredCollective out;
  out.latency_s = warm / 2.0;   // a ring all-reduce of 2 ranks takes 2 (R - 1) = 2 steps
  out.call_s = std::max(0.0, small - warm);
  // The gradient-sync model: 2 (R - 1) / R of the bytes over the link, plus the call and its steps
  // (R = 2). Noise can make the large one no slower than the small one: then its bytes over its
  // whole time.
  out.bytes_per_s = static_cast<double>(large_bytes) / (large > small ? large - small : std::max(large, 1e-9));
  return out;
}

double measure_stage_handoff(int busy_threads, int rounds) {
  using namespace std::chrono_literals;
  PW_CHECK(busy_threads >= 0 && rounds >= 1, "hand-off calibration: " << busy_threads << " busy threads, " << rounds << " rounds");
  // Everything that can throw comes before the peer starts; the busy threads stop and are joined
  // however this ends.
  std::vector<char> scratch(kScratchBytes / 8);
  rpc::InProcessHub hub(2);
  const auto message = kernels::Tensor::full({1}, 1.0);
  const auto deadline = [] { return Clock::now() + 30s; };
  std::vector<std::jthread> busy;
  for (int i = 0; i < busy_threads; ++i)
    busy.emplace_back([](std::stop_token stop) {
      std::vector<char> mine(kScratchBytes / 2);
      for (int k = 0; !stop.stop_requested(); ++k) std::memset(mine.data(), k, mine.size());
    });
  // Rank 1 answers each activation with a gradient, as the next stage does; an abort ends it.
  std::jthread peer([&] {
    try {
      for (int i = 0; i < rounds; ++i) {
        hub.take(0, 1, {i, 0, rpc::PayloadKind::Activation, 1}, deadline());
        hub.post(1, 0, {i, 0, rpc::PayloadKind::Gradient, 0}, message);
      }
    } catch (const std::exception& e) {
      hub.abort(std::string("the hand-off calibration's peer failed: ") + e.what());
    }
  });
  double total = 0.0;
  try {
    for (int i = 0; i < rounds; ++i) {
      work_for(1e-3, scratch);
      const auto t0 = Clock::now();
      hub.post(0, 1, {i, 0, rpc::PayloadKind::Activation, 1}, message);
      hub.take(1, 0, {i, 0, rpc::PayloadKind::Gradient, 0}, deadline());
      total += seconds_since(t0);
    }
  } catch (...) {
    hub.abort("the hand-off calibration failed");
    throw;
  }
  return total / rounds / 2.0;
}

}  // namespace pw::train
