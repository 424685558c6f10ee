// The offloaded optimizer's host update (kernels/ops/host_optimizer.h): Adam over fp32 tensors of
// the given sizes with the vectorised path this CPU has (AVX-512, else AVX2), beside the scalar
// path (the reference's loop) on the same threads and beside PyTorch's torch.optim.Adam on the CPU
// with as many threads (bench/torch_adam.py, run by /usr/bin/python3). One JSON line per size, with
// elements per second and the ratios. Before timing, the vectorised result is checked against the
// scalar one (every bit; a difference is an error, as nccl-tests check their sums).
//   build/bin/optimizer_bench [--elements 1048576,16777216] [--threads 2] [--steps 20] [--no-torch]
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/stats.h"
#include "core/clock.h"
#include "kernels/ops/host_optimizer.h"
#include "kernels/runtime.h"

using namespace pw;
using kernels::Tensor;
using kernels::VectorIsa;

namespace {

struct AdamTensors {
  Tensor w, g, m, v;
};

AdamTensors make(std::int64_t n, kernels::Device device) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(static_cast<std::size_t>(n)), g(static_cast<std::size_t>(n));
  for (auto& x : w) x = u(rng);
  for (auto& x : g) x = 0.5f * u(rng);
  return {Tensor::from_vector(w, {n}, device), Tensor::from_vector(g, {n}, device), Tensor::zeros({n}, kernels::DType::F32, device),
          Tensor::zeros({n}, kernels::DType::F32, device)};
}

// Median seconds of one Adam step over `t` with `isa`.
double time_adam(AdamTensors& t, VectorIsa isa, int warmup, int steps) {
  const kernels::AdamParams p{1e-3, 0.9, 0.999, 1e-8, 0.0};
  std::vector<double> seconds;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto t0 = Clock::now();
    kernels::host_adam_update(t.w, t.g, t.m, t.v, p, i + 1, isa);
    if (i >= warmup) seconds.push_back(seconds_since(t0));
  }
  return bench::median(seconds);
}

nlohmann::json torch_peer(std::int64_t n, int threads, int steps) {
  std::ostringstream cmd;
  cmd << "/usr/bin/python3 " << PW_SOURCE_DIR << "/bench/torch_adam.py --elements " << n << " --threads " << threads
      << " --steps " << steps << " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.str().c_str(), "r"), pclose);
  if (!pipe) return nullptr;
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, pipe.get()) != nullptr) out += buf;
  try {
    return nlohmann::json::parse(out);
  } catch (const std::exception&) {
    return nullptr;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("vectorised CPU Adam (the offloaded optimizer's update) beside a scalar loop and torch.optim.Adam");
  std::vector<std::int64_t> sizes{std::int64_t{1} << 20, std::int64_t{1} << 24};
  int threads = 1, steps = 20, warmup = 3;
  bool no_torch = false;
  app.add_option("--elements", sizes, "tensor sizes (elements)")->delimiter(',');
  app.add_option("--threads", threads, "threads of the CPU device (and torch.set_num_threads)");
  app.add_option("--steps", steps, "timed steps per measurement");
  app.add_flag("--no-torch", no_torch, "leave out the PyTorch peer");
  CLI11_PARSE(app, argc, argv);

  const auto device = kernels::Device::cpu(0);
  kernels::DeviceRuntime::get(device).set_threads(threads);
  const VectorIsa best = kernels::cpu::best_vector_isa();
  for (const auto n : sizes) {
    // The check: a few steps with each path from the same start give the same bits.
    {
      auto a = make(std::min<std::int64_t>(n, 1 << 16) + 3, device);
      auto b = make(std::min<std::int64_t>(n, 1 << 16) + 3, device);
      time_adam(a, best, 0, 3);
      time_adam(b, VectorIsa::Scalar, 0, 3);
      if (a.w.to_float_vector() != b.w.to_float_vector() || a.v.to_float_vector() != b.v.to_float_vector()) {
        std::fprintf(stderr, "optimizer_bench: the %s update differs from the scalar one\n", kernels::cpu::vector_isa_name(best));
        return 1;
      }
    }
    auto t = make(n, device);
    const double vector_s = time_adam(t, best, warmup, steps);
    const double scalar_s = time_adam(t, VectorIsa::Scalar, warmup, steps);
    nlohmann::json j{{"bench", "cpu_adam"},
                     {"elements", n},
                     {"threads", threads},
                     {"isa", kernels::cpu::vector_isa_name(best)},
                     {"vector_seconds", vector_s},
                     {"vector_elements_per_second", static_cast<double>(n) / vector_s},
                     {"scalar_seconds", scalar_s},
                     {"scalar_elements_per_second", static_cast<double>(n) / scalar_s},
                     {"vector_over_scalar", scalar_s / vector_s}};
    if (!no_torch) {
      const auto peer = torch_peer(n, threads, steps);
      if (peer.is_object()) {
        j["torch"] = peer;
        j["vector_over_torch"] = peer["default_seconds"].get<double>() / vector_s;
        j["vector_over_torch_for_loop"] = peer["for_loop_seconds"].get<double>() / vector_s;
      } else {
        j["torch"] = "not run (/usr/bin/python3 with torch not found)";
      }
    }
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
