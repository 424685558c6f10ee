#include "partition/profiler.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "kernels/ops/elementwise.h"
#include "kernels/runtime.h"
#include "kernels/stream.h"
#include "models/rng.h"

namespace pw::partition {
namespace {

using kernels::Device;
using kernels::Shape;
using kernels::Tensor;

Tensor random_tensor(const Shape& shape, Device device, std::uint64_t seed) {
  models::Rng rng(seed);
  std::vector<float> values(static_cast<std::size_t>(kernels::shape_numel(shape)));
  for (auto& v : values) v = static_cast<float>(rng.uniform(-1.0, 1.0));
  return Tensor::from_vector(values, shape, device);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::int64_t tensor_bytes(const std::vector<std::pair<std::string, models::Parameter*>>& params) {
  std::int64_t total = 0;
  for (const auto& [name, p] : params) total += static_cast<std::int64_t>(p->value.nbytes());
  return total;
}

struct Measured {
  double forward_seconds = 0.0;
  double backward_seconds = 0.0;
};

// Which of a layer's input `x` and output `y` a Context keeps (block-rounded bytes, 0 when it does
// not): our references are dropped, output first, and a dropped reference that frees nothing was
// not the last one. An output that is a view of the input (a reshape's) frees nothing either and
// is not counted as kept.
struct KeptParts {
  std::int64_t input_bytes = 0;
  std::int64_t output_bytes = 0;
  bool output_views_input = false;
};
KeptParts drop_references(kernels::CachingAllocator& allocator, Tensor& x, Tensor& y) {
  const auto block = [](const Tensor& t) {
    return static_cast<std::int64_t>(kernels::CachingAllocator::round_size(t.nbytes()));
  };
  const std::int64_t input_block = block(x), output_block = block(y);
  const long input_users = x.storage_users();
  const std::int64_t with_both = allocator.stats().in_use;
  y = Tensor();
  KeptParts kept;
  kept.output_views_input = x.storage_users() < input_users;
  const std::int64_t with_input = allocator.stats().in_use;
  x = Tensor();
  kept.output_bytes = !kept.output_views_input && with_both == with_input ? output_block : 0;
  kept.input_bytes = with_input == allocator.stats().in_use ? input_block : 0;
  return kept;
}

// One forward and backward of `layer` on a fresh random input. With `memory` given, also records
// the output and what stays allocated (allocator in_use) between forward and backward.
Measured run_once(models::Layer& layer, const Shape& input_shape, Device device, std::uint64_t seed,
                  LayerProfile* memory) {
  auto& allocator = kernels::DeviceRuntime::get(device).allocator();
  auto& stream = kernels::current_stream(device);
  const Shape output_shape = layer.output_shape(input_shape);
  stream.synchronize();
  // A cached block larger than asked would count whole: measure from an empty cache.
  if (memory != nullptr) allocator.release_cache();
  const std::int64_t start_in_use = allocator.stats().in_use;
  Tensor x = layer.example_input(input_shape, device, seed);
  stream.synchronize();
  if (memory != nullptr) allocator.reset_peak();

  Measured m;
  const auto forward_start = Clock::now();
  auto out = layer.forward(x, models::Mode::Train);
  stream.synchronize();
  m.forward_seconds = seconds_since(forward_start);

  if (memory != nullptr) {
    memory->output_shape = out.y.shape();
    memory->output_bytes = static_cast<std::int64_t>(out.y.nbytes());
    const KeptParts kept = drop_references(allocator, x, out.y);
    memory->stash_bytes = allocator.stats().in_use - start_in_use;
    memory->kept_input_bytes = kept.input_bytes;
    memory->kept_output_bytes = kept.output_bytes;
    memory->output_views_input = kept.output_views_input;
  }
  const Tensor grad = random_tensor(output_shape, device, seed + 1);
  stream.synchronize();
  const auto backward_start = Clock::now();
  layer.backward(*out.ctx, grad);
  stream.synchronize();
  m.backward_seconds = seconds_since(backward_start);
  if (memory != nullptr) {
    memory->workspace_bytes = std::max<std::int64_t>(0, allocator.stats().peak_in_use - start_in_use - memory->stash_bytes);
  }
  return m;
}

// The backward of `layer` in two halves on a fresh random input: backward_input, then
// backward_weight, each timed.
struct MeasuredHalves {
  double input_seconds = 0.0;
  double weight_seconds = 0.0;
};
MeasuredHalves run_split_once(models::Layer& layer, const Shape& input_shape, Device device, std::uint64_t seed) {
  auto& stream = kernels::current_stream(device);
  Tensor x = layer.example_input(input_shape, device, seed);
  auto out = layer.forward(x, models::Mode::Train);
  const Tensor grad = random_tensor(out.y.shape(), device, seed + 1);
  out.y = Tensor();
  stream.synchronize();
  MeasuredHalves m;
  const auto input_start = Clock::now();
  Tensor grad_input = layer.backward_input(*out.ctx, grad);
  stream.synchronize();
  m.input_seconds = seconds_since(input_start);
  const auto weight_start = Clock::now();
  layer.backward_weight(*out.ctx);
  stream.synchronize();
  m.weight_seconds = seconds_since(weight_start);
  return m;
}

// One optimizer step of `layer`'s parameters, whose gradients the last backward left, as the stage
// executor takes it: the update check's sum of squares over every gradient, the update, and the
// gradients zeroed. Median of `repeats` after one that creates the optimizer state.
// (An offloaded job's update is not the device's: it is predicted from host bandwidth instead.)
double time_optimizer_step(models::Layer& layer, Device device, models::OptimizerConfig config, int repeats) {
  config.offload = models::OptimizerOffload::None;
  std::vector<models::Parameter*> params;
  for (const auto& [name, p] : layer.named_parameters()) params.push_back(p);
  if (params.empty()) return 0.0;
  for (auto* p : params)
    if (!p->grad.defined()) return 0.0;
  auto& stream = kernels::current_stream(device);
  models::Optimizer optimizer(params, config);
  std::vector<double> seconds;
  double squares = 0.0;
  for (int r = 0; r <= repeats; ++r) {
    stream.synchronize();
    const auto start = Clock::now();
    for (auto* p : params) squares += kernels::sum_of_squares(p->grad);
    optimizer.step();
    optimizer.zero_grad();
    stream.synchronize();
    if (r > 0) seconds.push_back(seconds_since(start));
  }
  PW_CHECK(!std::isnan(squares), "the profiled gradients of " << params.size() << " parameters are not numbers");
  return median(seconds);
}

// The input half of a split backward of `layer`, from an empty cache: the most allocated while it
// runs on a Context (with our references to the input and output dropped first, as a stage drops
// them) and what stays allocated once the gradients are dropped too; then, on a second run that
// keeps our references, which of the input and output stay among that (a dropped reference that
// frees nothing was not the last one).
void measure_input_half(models::Layer& layer, const Shape& input_shape, Device device, std::uint64_t seed,
                        LayerProfile& memory) {
  auto& allocator = kernels::DeviceRuntime::get(device).allocator();
  auto& stream = kernels::current_stream(device);
  stream.synchronize();
  allocator.release_cache();
  std::int64_t start_in_use = allocator.stats().in_use;
  {
    auto out = layer.forward(layer.example_input(input_shape, device, seed), models::Mode::Train);
    Tensor grad = random_tensor(out.y.shape(), device, seed + 1);
    out.y = Tensor();
    stream.synchronize();
    allocator.release_cache();   // the forward's freed blocks, reused larger than asked, would count whole
    allocator.reset_peak();
    Tensor grad_input = layer.backward_input(*out.ctx, grad);
    stream.synchronize();
    memory.input_half_peak_bytes = allocator.stats().peak_in_use - start_in_use;
    grad = Tensor();
    grad_input = Tensor();
    memory.weight_half_bytes = allocator.stats().in_use - start_in_use;
    layer.backward_weight(*out.ctx);
    stream.synchronize();
  }
  allocator.release_cache();
  start_in_use = allocator.stats().in_use;
  Tensor x = layer.example_input(input_shape, device, seed);
  auto out = layer.forward(x, models::Mode::Train);
  Tensor grad = random_tensor(out.y.shape(), device, seed + 1);
  Tensor grad_input = layer.backward_input(*out.ctx, grad);
  stream.synchronize();
  grad = Tensor();
  grad_input = Tensor();
  const KeptParts kept = drop_references(allocator, x, out.y);
  memory.weight_half_kept_input_bytes = kept.input_bytes;
  memory.weight_half_kept_output_bytes = kept.output_bytes;
  layer.backward_weight(*out.ctx);
  stream.synchronize();
}

// Layer `spec` built, initialised from `seed` under its name, on `device`.
std::unique_ptr<models::Layer> build_layer(const models::LayerSpec& spec, std::uint64_t seed, Device device) {
  auto layer = spec.build();
  layer->initialize(seed, spec.name + ".");
  layer->to(device);
  return layer;
}

// Each op's times, by layer of the chain, when a pass records them.
struct ChainTimes {
  std::vector<std::vector<double>> forward, backward;
};

// One pass of a chain: `in_flight` micro-batches forward through `layers` in order (inputs from
// `seed`), then each back in reverse, oldest first, as the schedules send them; each op timed into
// `times` when given. Leaves between two ops once `keep_going` says no (false: it left early).
bool run_chain(std::vector<std::unique_ptr<models::Layer>>& layers, const Shape& input_shape, const Shape& output_shape,
               Device device, std::size_t in_flight, std::uint64_t seed, ChainTimes* times,
               const std::function<bool()>& keep_going) {
  auto& stream = kernels::current_stream(device);
  const std::size_t n = layers.size();
  // contexts[m][i]: layer i's for micro-batch m.
  std::vector<std::vector<std::unique_ptr<models::Context>>> contexts(in_flight);
  for (std::size_t m = 0; m < in_flight; ++m) {
    Tensor x = layers.front()->example_input(input_shape, device, seed + m);
    stream.synchronize();
    for (std::size_t i = 0; i < n; ++i) {
      if (keep_going && !keep_going()) return false;
      const auto start = Clock::now();
      auto out = layers[i]->forward(x, models::Mode::Train);
      stream.synchronize();
      if (times != nullptr) times->forward[i].push_back(seconds_since(start));
      x = std::move(out.y);
      contexts[m].push_back(std::move(out.ctx));
    }
  }
  for (std::size_t m = 0; m < in_flight; ++m) {
    Tensor grad = random_tensor(output_shape, device, seed + 1000 + m);
    stream.synchronize();
    for (std::size_t i = n; i-- > 0;) {
      if (keep_going && !keep_going()) return false;
      const auto start = Clock::now();
      grad = layers[i]->backward(*contexts[m][i], grad);
      stream.synchronize();
      if (times != nullptr) times->backward[i].push_back(seconds_since(start));
      contexts[m][i].reset();
    }
  }
  return true;
}

// Threads that run a chain of layers [begin, end) on CPU devices of their own, pass after pass,
// from start() until stop(): the other ranks' work beside a timed chain.
class CoRunners {
 public:
  CoRunners(const ModelDescription& model, const std::vector<Shape>& shapes, std::size_t begin, std::size_t end,
            Device device, const ProfileOptions& options) {
    const int threads = kernels::DeviceRuntime::get(device).threads();
    try {
      for (int k = 1; k <= options.co_runners; ++k) {
        const Device own = Device::cpu(device.index + k);
        auto& runtime = kernels::DeviceRuntime::get(own);
        if (runtime.threads() != threads) {
          restore_threads_.emplace_back(own, runtime.threads());
          runtime.set_threads(threads);
        }
        threads_.emplace_back([this, &model, &shapes, begin, end, own, options] {
          try {
            run(model, shapes, begin, end, own, options);
          } catch (...) {
            const std::lock_guard lock(mutex_);
            if (!error_) error_ = std::current_exception();
            ++failed_;
            changed_.notify_all();
          }
        });
      }
    } catch (...) {
      end_threads();
      throw;
    }
  }
  ~CoRunners() { end_threads(); }
  CoRunners(const CoRunners&) = delete;
  CoRunners& operator=(const CoRunners&) = delete;

  // Returns once every co-runner is inside a pass.
  void start() { set_active(true, [this] { return running_ == static_cast<int>(threads_.size()); }); }
  // Returns once every co-runner has left its pass.
  void stop() { set_active(false, [this] { return running_ == 0; }); }

 private:
  template <typename Ready>
  void set_active(bool active, Ready ready) {
    std::unique_lock lock(mutex_);
    active_ = active;
    changed_.notify_all();
    const bool done = changed_.wait_for(lock, std::chrono::minutes(5), [&] { return ready() || failed_ > 0; });
    if (failed_ > 0) std::rethrow_exception(error_);
    PW_CHECK(done, "profiling: the " << threads_.size() << " thread(s) running the chain beside the timed one did not "
                                     << (active ? "start" : "stop") << " a pass within 5 minutes");
  }

  // Joins the threads and gives the co-runners' devices back their thread counts.
  void end_threads() {
    {
      const std::lock_guard lock(mutex_);
      quit_ = true;
      active_ = false;
    }
    changed_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    for (const auto& [device, threads] : restore_threads_) kernels::DeviceRuntime::get(device).set_threads(threads);
    restore_threads_.clear();
  }

  void run(const ModelDescription& model, const std::vector<Shape>& shapes, std::size_t begin, std::size_t end,
           Device device, const ProfileOptions& options) {
    std::vector<std::unique_ptr<models::Layer>> layers;
    for (std::size_t i = begin; i < end; ++i) layers.push_back(build_layer(model.layers[i], options.seed, device));
    const auto in_flight = static_cast<std::size_t>(options.micro_batches_in_flight);
    const std::uint64_t seed = models::hash_name(options.seed + 17 + device.index, model.layers[begin].name);
    const auto keep_going = [this] {
      const std::lock_guard lock(mutex_);
      return active_;
    };
    std::unique_lock lock(mutex_);
    while (true) {
      changed_.wait(lock, [this] { return active_ || quit_; });
      if (quit_) return;
      ++running_;
      changed_.notify_all();
      lock.unlock();
      while (run_chain(layers, shapes[begin], shapes[end], device, in_flight, seed, nullptr, keep_going)) {
      }
      lock.lock();
      --running_;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  bool active_ = false, quit_ = false;
  int running_ = 0, failed_ = 0;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
  std::vector<std::pair<Device, int>> restore_threads_;
};

}  // namespace

// Each layer's median time (times[i]: its runs, the k-th of every layer from one micro-batch of
// one pass), scaled so that they add up to the median of the chain's totals (the k-th runs of all
// layers added up). A job's step time is the median of whole steps: a slow moment of the machine
// stretches every op of a step alike, so the sum of the ops' medians runs below the median of
// the sums.
std::vector<double> medians_adding_up_to_the_median_total(const std::vector<std::vector<double>>& times) {
  std::vector<double> medians(times.size(), 0.0);
  if (times.empty()) return medians;
  std::size_t runs = times.front().size();
  for (const auto& t : times) runs = std::min(runs, t.size());
  if (runs == 0) return medians;
  double sum_of_medians = 0.0;
  for (std::size_t i = 0; i < times.size(); ++i) sum_of_medians += medians[i] = median(times[i]);
  std::vector<double> totals(runs, 0.0);
  for (const auto& t : times)
    for (std::size_t k = 0; k < runs; ++k) totals[k] += t[k];
  const double scale = sum_of_medians > 0.0 ? median(totals) / sum_of_medians : 1.0;
  for (auto& m : medians) m *= scale;
  return medians;
}

namespace {

// Forward through layers [begin, end) in order and backward in reverse, as a stage runs them,
// `repeats` times after one warm-up (more until the timed passes take options.min_chain_seconds),
// with options.micro_batches_in_flight micro-batches forwarded
// before the first goes back, and going back oldest first as the schedules send them; each layer's
// median forward and backward replace the lone run's.
// The split halves keep the lone run's ratio to its backward.
// With options.co_runners on a CPU device, each pass is followed by one with the co-runners
// running beside it (the two alternate, so that the machine's drift falls on both alike).
void time_in_chain(const ModelDescription& model, const std::vector<Shape>& shapes, std::size_t begin, std::size_t end,
                   Device device, const ProfileOptions& options, std::vector<LayerProfile>& profiles) {
  std::vector<std::unique_ptr<models::Layer>> layers;
  for (std::size_t i = begin; i < end; ++i) layers.push_back(build_layer(model.layers[i], options.seed, device));
  const std::size_t n = layers.size();
  const auto in_flight = static_cast<std::size_t>(options.micro_batches_in_flight);
  ChainTimes alone{std::vector<std::vector<double>>(n), std::vector<std::vector<double>>(n)};
  ChainTimes beside = alone;
  std::optional<CoRunners> co_runners;
  if (options.co_runners > 0 && !device.is_cuda()) co_runners.emplace(model, shapes, begin, end, device, options);
  const std::uint64_t seed = models::hash_name(options.seed, model.layers[begin].name) + 7;
  constexpr int kMostPasses = 1000;
  double timed = 0.0;
  for (int r = 0; r <= options.repeats || (timed < options.min_chain_seconds && r <= kMostPasses); ++r) {
    const std::uint64_t variant = seed + static_cast<std::uint64_t>(r) * in_flight;
    const auto start = Clock::now();
    run_chain(layers, shapes[begin], shapes[end], device, in_flight, variant, r > 0 ? &alone : nullptr, {});
    if (r > 0) timed += seconds_since(start);
    if (!co_runners) continue;
    co_runners->start();
    run_chain(layers, shapes[begin], shapes[end], device, in_flight, variant, r > 0 ? &beside : nullptr, {});
    co_runners->stop();
  }
  const auto alone_forward = medians_adding_up_to_the_median_total(alone.forward);
  const auto alone_backward = medians_adding_up_to_the_median_total(alone.backward);
  const auto beside_forward = co_runners ? medians_adding_up_to_the_median_total(beside.forward) : std::vector<double>{};
  const auto beside_backward = co_runners ? medians_adding_up_to_the_median_total(beside.backward) : std::vector<double>{};
  for (std::size_t i = 0; i < n; ++i) {
    auto& p = profiles[begin + i];
    const double lone_backward = p.backward_seconds;
    p.forward_seconds = alone_forward[i];
    p.backward_seconds = alone_backward[i];
    if (lone_backward > 0.0) {
      p.input_half_seconds *= p.backward_seconds / lone_backward;
      p.weight_half_seconds *= p.backward_seconds / lone_backward;
    }
    if (co_runners) {
      p.co_run_forward_seconds = beside_forward[i];
      p.co_run_backward_seconds = beside_backward[i];
    }
  }
}

// What a layer holds while a chain runs through it: weights and gradients, its stash, its output
// and its working set.
std::int64_t chain_bytes(const LayerProfile& p, int micro_batches_in_flight) {
  return 2 * p.param_bytes + p.buffer_bytes + micro_batches_in_flight * (p.stash_bytes + p.output_bytes) +
         p.workspace_bytes;
}

}  // namespace

std::vector<Shape> layer_shapes(const ModelDescription& model, std::int64_t micro_batch_size) {
  PW_INPUT_CHECK(micro_batch_size >= 1, "micro-batch size must be >= 1, got " << micro_batch_size);
  Shape shape = model.sample_shape;
  shape.insert(shape.begin(), micro_batch_size);
  std::vector<Shape> shapes{shape};
  for (const auto& spec : model.layers) {
    shape = spec.build()->output_shape(shape);
    shapes.push_back(shape);
  }
  return shapes;
}

std::vector<LayerProfile> profile_layers(const ModelDescription& model, Device device, const ProfileOptions& options) {
  PW_INPUT_CHECK(options.repeats >= 1, "profiling needs at least 1 repeat, got " << options.repeats);
  PW_INPUT_CHECK(options.micro_batches_in_flight >= 1,
                 "profiling needs at least 1 micro-batch in flight, got " << options.micro_batches_in_flight);
  PW_INPUT_CHECK(options.co_runners >= 0, "profiling beside a negative number of threads (" << options.co_runners << ")");
  PW_INPUT_CHECK(options.min_chain_seconds >= 0.0 && std::isfinite(options.min_chain_seconds),
                 "profiling needs a chain time of 0 seconds or more, got " << options.min_chain_seconds);
  const auto shapes = layer_shapes(model, options.micro_batch_size);
  std::vector<LayerProfile> profiles;
  profiles.reserve(model.layers.size());
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const auto& spec = model.layers[i];
    auto layer = build_layer(spec, options.seed, device);

    LayerProfile p;
    p.name = spec.name;
    p.parameters = layer->parameter_count();
    p.param_bytes = tensor_bytes(layer->named_parameters());
    for (const auto& [name, b] : layer->named_buffers()) {
      p.buffer_bytes += static_cast<std::int64_t>(b->value.nbytes());
      p.buffer_tensor_bytes.push_back(static_cast<std::int64_t>(b->value.nbytes()));
    }
    for (const auto& [name, param] : layer->named_parameters())
      p.parameter_tensor_bytes.push_back(static_cast<std::int64_t>(param->value.nbytes()));
    p.input_bytes = kernels::shape_numel(shapes[i]) * static_cast<std::int64_t>(kernels::dtype_size(kernels::DType::F32));

    const std::uint64_t seed = models::hash_name(options.seed, spec.name);
    run_once(*layer, shapes[i], device, seed, nullptr);   // warm-up: primitive creation, allocator growth
    run_split_once(*layer, shapes[i], device, seed);
    std::vector<double> forward, backward, input_half, weight_half;
    for (int r = 0; r < options.repeats; ++r) {
      const auto m = run_once(*layer, shapes[i], device, seed + 2 * static_cast<std::uint64_t>(r), r == 0 ? &p : nullptr);
      forward.push_back(m.forward_seconds);
      backward.push_back(m.backward_seconds);
      const auto halves = run_split_once(*layer, shapes[i], device, seed + 2 * static_cast<std::uint64_t>(r));
      input_half.push_back(halves.input_seconds);
      weight_half.push_back(halves.weight_seconds);
    }
    measure_input_half(*layer, shapes[i], device, seed, p);
    p.forward_seconds = median(forward);
    p.backward_seconds = median(backward);
    p.input_half_seconds = median(input_half);
    p.weight_half_seconds = median(weight_half);
    if (options.optimizer) p.optimizer_seconds = time_optimizer_step(*layer, device, *options.optimizer, options.repeats);
    // Which weights mixed precision gives a 16-bit copy: the layer says so once it runs in bf16.
    layer->set_precision(models::Precision::Bf16);
    for (const auto& [name, param] : layer->named_parameters())
      if (param->compute.defined()) p.copied_tensor_bytes.push_back(static_cast<std::int64_t>(param->value.nbytes()));
    profiles.push_back(std::move(p));
  }
  const std::int64_t window = chain_window_bytes_for(options, device, host_available_memory_bytes());
  for (const auto& [begin, end] : chain_windows(profiles, window, options.micro_batches_in_flight))
    time_in_chain(model, shapes, begin, end, device, options, profiles);
  return profiles;
}

std::int64_t chain_window_bytes_for(const ProfileOptions& options, Device device, std::int64_t available_host_bytes) {
  std::int64_t window = options.chain_window_bytes;
  // A GPU's chain is in its own memory, and co-runners run on CPU devices only.
  // Rounded down to a power of two, so that the free memory's small moves between two plans do not
  // move the chains' boundaries.
  if (!device.is_cuda() && available_host_bytes > 0) {
    const auto bound = static_cast<std::uint64_t>(available_host_bytes / 2 / (1 + std::max(0, options.co_runners)));
    window = std::min(window, static_cast<std::int64_t>(std::bit_floor(bound)));
  }
  return std::max<std::int64_t>(window, 1);
}

std::vector<std::pair<std::size_t, std::size_t>> chain_windows(const std::vector<LayerProfile>& profiles,
                                                               std::int64_t window_bytes, int micro_batches_in_flight) {
  std::vector<std::pair<std::size_t, std::size_t>> windows;
  const auto bytes_of = [&](std::size_t i) { return chain_bytes(profiles[i], micro_batches_in_flight); };
  for (std::size_t begin = 0; begin < profiles.size();) {
    std::size_t end = begin + 1;
    std::int64_t bytes = bytes_of(begin);
    while (end < profiles.size() && bytes + bytes_of(end) <= window_bytes) bytes += bytes_of(end++);
    windows.emplace_back(begin, end);
    begin = end;
  }
  return windows;
}

int micro_batches_in_flight_of(int micro_batches) { return micro_batches >= 2 ? 2 : 1; }

ProfileOptions job_profile_options(std::int64_t micro_batch_size, int micro_batches) {
  ProfileOptions options;
  options.micro_batch_size = micro_batch_size;
  options.micro_batches_in_flight = micro_batches_in_flight_of(micro_batches);
  return options;
}

std::vector<LayerProfile> profile_layers(const ModelDescription& model, Device device, std::int64_t micro_batch_size,
                                         int repeats) {
  ProfileOptions options;
  options.micro_batch_size = micro_batch_size;
  options.repeats = repeats;
  return profile_layers(model, device, options);
}

}  // namespace pw::partition
