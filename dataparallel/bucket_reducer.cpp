#include "dataparallel/bucket_reducer.h"

#include "dataparallel/buffer_broadcast.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "core/clock.h"
#include "core/error.h"
#include "core/trace.h"
#include "kernels/allocator.h"
#include "kernels/runtime.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/half_support.h"
#include "kernels/ops/host_optimizer.h"

namespace pw::dp {

namespace {
// Each gradient's place in its bucket starts on a 256-byte boundary: cuDNN and cuBLAS write
// gradients there, and their fast (tensor-core) algorithms want aligned pointers.
std::int64_t aligned_elements(std::int64_t elements) {
  constexpr std::int64_t kAlign = 256 / sizeof(float);
  return (elements + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

struct BucketReducer::Core {
  struct Bucket {
    std::vector<models::Parameter*> parameters;
    std::int64_t elements = 0;
    kernels::Tensor flat;   // the gradients, back to back
    int pending = 0;        // gradients not final yet this step
    // Sharded optimizer state: reduce-scattered; the weights live in `weights`, laid out as `flat`,
    // in `weight_dtype`. A 16-bit bucket (weights with compute copies under mixed precision) holds
    // the 16-bit weights there and the fp32 master copy of this replica's segment in `masters`.
    bool sharded = false;
    kernels::DType weight_dtype = kernels::DType::F32;
    kernels::Tensor weights;
    kernels::Tensor masters;
    std::size_t last = 0;   // the position, in backward order, of its last parameter
  };

  std::shared_ptr<Collective> collective;
  BucketOptions options;
  TraceTrack track;
  std::vector<Bucket> buckets;   // in reduction order
  std::map<models::Parameter*, std::size_t> bucket_of;
  std::map<models::Parameter*, bool> seen;

  std::mutex mutex;
  std::condition_variable changed;
  std::size_t next = 0;          // the next bucket to reduce
  std::int64_t step = -1;
  bool stopping = false;
  bool reducing = false;         // the thread is inside a collective
  std::optional<std::string> aborted;
  std::exception_ptr error;
  ReduceStats stats;

  // Sharded state: what the thread gathers after each optimizer step, in this order: the buffers
  // that follow replica 0 (one item, when there are any), then the sharded buckets in the order
  // forward first uses them. An item's place in it is what a layer waits for.
  static constexpr std::size_t kNotGathered = static_cast<std::size_t>(-1);
  std::vector<models::Buffer*> followed_buffers;
  std::vector<std::size_t> gather_order;      // bucket indices, forward order
  std::vector<std::size_t> gather_position;   // per bucket: its item, or kNotGathered
  bool gathering = false;                     // a gather round is under way
  std::size_t gathered = 0;                   // its items done
  std::int64_t gathered_step = -1;            // the step whose update it gathers
  std::exception_ptr gather_error;            // kept until the job ends: the group is unusable
  // Per layer: the round's items its forward waits for, found once (buckets and followed buffers
  // are fixed before the first round).
  std::map<const models::Layer*, std::vector<std::size_t>> items_of_layer;

  void work();
  void reduce(Bucket& bucket);
  void gather_next(std::unique_lock<std::mutex>& lock);
  std::size_t gather_items() const { return (followed_buffers.empty() ? 0 : 1) + gather_order.size(); }
  // Waits until the round's items `needed` (ascending) arrived; the caller holds `lock`. `who`
  // says what waited ("layer 'fc1'"); a timeout names the first item still missing.
  void wait_gathered(std::unique_lock<std::mutex>& lock, const std::vector<std::size_t>& needed,
                     rpc::Deadline deadline, const std::string& who);
  std::string describe_item(std::size_t item) const;
  // The collective is the thread's while a round is under way.
  void check_no_gather(const char* what) {
    std::lock_guard lock(mutex);
    PW_CHECK(!gathering, what << " while the weights are still being gathered (await_all_weights first)");
  }
  std::int64_t segment(const Bucket& b) const { return b.elements / collective->size(); }
  pipeline::UpdateShare share_of_this_replica() const;
  // Flat {elements} of bucket `b` where this replica's segment is `mine` ({segment}) and every
  // other segment its owner's, all-gathered.
  kernels::Tensor gathered_segments(const Bucket& b, const kernels::Tensor& mine);
  std::optional<pipeline::UpdateShare> share;   // sharded state only; fixed once the buckets are
};

namespace {
kernels::Tensor host_copy(const kernels::Tensor& t) {
  auto copy = kernels::Tensor::empty_pinned(t.shape(), t.dtype());   // outside every device's cap
  copy.copy_from(t);
  return copy;
}

// Host copies of each parameter's `member` tensor, and the parameters let go of theirs (a tensor
// in host memory already, an fp32 master built there, is taken as it is).
std::vector<kernels::Tensor> stage_on_host(const std::vector<models::Parameter*>& parameters,
                                           kernels::Tensor models::Parameter::*member) {
  std::vector<kernels::Tensor> staged;
  staged.reserve(parameters.size());
  for (auto* p : parameters) {
    const kernels::Tensor& t = p->*member;
    staged.push_back(t.is_host_memory() ? t : host_copy(t));
    p->*member = kernels::Tensor();
  }
  return staged;
}

// `value` rounded to `dtype`, in host memory: on the device, one weight at a time, or, for an fp32
// master built in host memory (models::ParameterHome::Host), on the host, the device not involved.
kernels::Tensor rounded_on_host(const kernels::Tensor& value, kernels::DType dtype) {
  if (!value.is_host_memory()) return host_copy(value.to(dtype));
  auto rounded = kernels::Tensor::empty_pinned(value.shape(), dtype);
  kernels::host_round(value, rounded);
  return rounded;
}
}  // namespace

BucketReducer::BucketReducer(std::vector<models::Parameter*> parameters, std::shared_ptr<Collective> collective,
                             BucketOptions options, TraceTrack track, std::vector<models::Parameter*> tied)
    : core_(std::make_shared<Core>()) {
  PW_INPUT_CHECK(options.bucket_bytes > 0, "the gradient bucket size must be positive");
  PW_CHECK(collective != nullptr, "a gradient reducer needs a collective");
  auto& c = *core_;
  c.collective = std::move(collective);
  c.options = options;
  c.track = track;
  const bool sharding = options.optimizer_state == OptimizerState::Sharded;
  const std::set<models::Parameter*> alone(tied.begin(), tied.end());
  // Backward finishes the last layers first, so buckets are filled from the end. Sharded buckets
  // hold one kind of weight each (fp32, or 16-bit copies with fp32 masters): one bucket of each
  // kind is open at a time, and the buckets are reduced in the order their last gradient is ready.
  std::reverse(parameters.begin(), parameters.end());
  std::map<std::pair<bool, kernels::DType>, std::size_t> open;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    auto* p = parameters[i];
    PW_CHECK(p->grad.dtype() == kernels::DType::F32, "gradient of '" << p->name << "' is " << p->grad.describe()
                                                                     << "; buckets hold F32");
    const bool sharded = sharding && p->value.dtype() == kernels::DType::F32;
    // Mixed precision: a weight with a 16-bit compute copy keeps only that copy whole.
    const auto weight_dtype = sharded && p->compute.defined() && kernels::is_half(p->compute.dtype())
                                  ? p->compute.dtype()
                                  : kernels::DType::F32;
    const auto key = std::pair{sharded, weight_dtype};
    const auto it = open.find(key);
    // A tied weight has a bucket of its own, so its segments are the same elements on every stage
    // holding it (the stages sum the owned segments only).
    const bool own_bucket = alone.count(p) > 0;
    if (own_bucket || it == open.end() ||
        static_cast<std::size_t>(c.buckets[it->second].elements) * sizeof(float) >= options.bucket_bytes ||
        alone.count(c.buckets[it->second].parameters.back()) > 0) {
      c.buckets.emplace_back();
      c.buckets.back().sharded = sharded;
      c.buckets.back().weight_dtype = weight_dtype;
      open[key] = c.buckets.size() - 1;
    }
    auto& b = c.buckets[open[key]];
    b.parameters.push_back(p);
    b.elements += aligned_elements(p->grad.numel());
    b.last = i;
  }
  std::stable_sort(c.buckets.begin(), c.buckets.end(), [](const Core::Bucket& a, const Core::Bucket& b) { return a.last < b.last; });
  const std::int64_t members = c.collective->size();
  const std::int64_t me = c.collective->rank();
  for (std::size_t i = 0; i < c.buckets.size(); ++i) {
    auto& b = c.buckets[i];
    for (auto* p : b.parameters) c.bucket_of[p] = i;
    // Sharded: R equal segments, each starting aligned.
    if (b.sharded) b.elements = (b.elements + members * aligned_elements(1) - 1) / (members * aligned_elements(1)) *
                                (members * aligned_elements(1));
    c.stats.bytes += b.elements * static_cast<std::int64_t>(sizeof(float));
    const auto device = b.parameters.front()->grad.device();
    // One bucket at a time, its tensors waiting in host memory while the bucket takes their place:
    // the device never holds a tensor and its bucket copy at once, so a capped device that fits
    // the job's steady state fits its setup too.
    for (auto* p : b.parameters)
      PW_CHECK(p->grad.device() == device, "gradients of one stage on two devices");
    const auto staged_grads = stage_on_host(b.parameters, &models::Parameter::grad);
    const bool half = b.sharded && b.weight_dtype != kernels::DType::F32;
    // fp32 values in host memory (built there for offloaded masters, or to be cut into segments):
    // the bucket's 16-bit weights will replace the compute copies, which go now, so that the device
    // never holds both (it holds no fp32 values to free here). Nothing reads them before then.
    const bool values_on_host = std::all_of(b.parameters.begin(), b.parameters.end(),
                                            [](const models::Parameter* p) { return p->value.is_host_memory(); });
    if (half && values_on_host)
      for (auto* p : b.parameters) p->compute = kernels::Tensor();
    // The freed blocks go back too: cached, one would serve (and count as) up to twice a smaller
    // tensor of the bucket's for as long as the job runs (a 256 KiB fp32 gradient held the 136 KiB
    // of 16-bit weights that replaced it).
    kernels::DeviceRuntime::get(device).allocator().release_cache();
    {
      // The bucket is the gradients' only home (gradient_as_bucket_view).
      kernels::MemoryKindScope kind(kernels::MemoryKind::Gradients);
      b.flat = kernels::Tensor::empty({b.elements}, kernels::DType::F32, device);
    }
    std::int64_t at = 0;
    for (std::size_t k = 0; k < b.parameters.size(); ++k) {
      auto* p = b.parameters[k];
      auto home = b.flat.view(at, staged_grads[k].shape());
      home.copy_from(staged_grads[k]);
      p->grad = home;
      at += aligned_elements(home.numel());
    }
    if (!b.sharded) continue;
    std::vector<kernels::Tensor> staged_rounded;
    if (half)
      for (auto* p : b.parameters) staged_rounded.push_back(rounded_on_host(p->value, b.weight_dtype));
    auto allocate_weights = [&] {
      kernels::MemoryKindScope weights_kind(kernels::MemoryKind::Parameters);   // the weights live here
      b.weights = kernels::Tensor::zeros({b.elements}, b.weight_dtype, device);
      if (half) {
        kernels::MemoryKindScope masters_kind(kernels::MemoryKind::MasterWeights);
        b.masters = options.masters == models::OptimizerOffload::Host
                        ? kernels::Tensor::zeros_host({c.segment(b)}, kernels::DType::F32, device)
                        : kernels::Tensor::zeros({c.segment(b)}, kernels::DType::F32, device);
      }
    };
    // 16-bit weights and master segments are smaller than the fp32 values they replace: made
    // before those go, so that no freed fp32 block serves (and counts twice the bytes of) them.
    if (half) allocate_weights();
    const auto staged_values = stage_on_host(b.parameters, &models::Parameter::value);
    if (!half) allocate_weights();
    const std::int64_t lo = me * c.segment(b), hi = lo + c.segment(b);
    at = 0;
    for (std::size_t k = 0; k < b.parameters.size(); ++k) {
      auto* p = b.parameters[k];
      const kernels::Tensor& whole = staged_values[k];
      auto weight_home = b.weights.view(at, whole.shape());
      weight_home.copy_from(half ? staged_rounded[k] : whole);
      if (half) {
        // The fp32 values of this replica's segment become its masters; the whole fp32 tensor goes.
        const std::int64_t n = whole.numel();
        const std::int64_t begin = std::max(at, lo), end = std::min(at + n, hi);
        if (end > begin) b.masters.copy_elements_from(whole, begin - at, begin - lo, end - begin);
        p->compute = weight_home;
      }
      p->value = weight_home;
      at += aligned_elements(weight_home.numel());
    }
  }
  c.stats.buckets = static_cast<std::int64_t>(c.buckets.size());
  if (sharding) c.share = c.share_of_this_replica();
  // Forward reaches a bucket's first parameter last in backward order: the highest `last` first.
  c.gather_position.assign(c.buckets.size(), Core::kNotGathered);
  for (std::size_t i = c.buckets.size(); i-- > 0;)
    if (c.buckets[i].sharded) {
      c.gather_position[i] = c.gather_order.size();
      c.gather_order.push_back(i);
    }
  c.next = c.buckets.size();   // nothing to do before the first step
  worker_ = std::thread([core = core_] { core->work(); });
}

BucketReducer::~BucketReducer() {
  // A gather round under way ends first (the thread drains it before it stops): the other
  // replicas' threads take part in it, and would wait in a gather this one left.
  bool stuck = false;
  {
    std::lock_guard lock(core_->mutex);
    core_->stopping = true;
    stuck = core_->reducing && core_->aborted.has_value();
  }
  core_->changed.notify_all();
  // An aborted reduction waits for a replica that is gone, until the collective's timeout; the
  // thread keeps what it uses alive and ends on its own.
  if (stuck) worker_.detach();
  else worker_.join();
}

void BucketReducer::start_step(std::int64_t step) {
  auto& c = *core_;
  std::lock_guard lock(c.mutex);
  if (c.aborted) return;   // finish() reports it
  PW_CHECK(c.next == c.buckets.size() || c.step < 0, "a step started before the last one's gradients were reduced");
  c.step = step;
  c.next = 0;
  c.error = nullptr;
  c.stats.reduce_seconds = 0.0;
  c.stats.exposed_seconds = 0.0;
  c.seen.clear();
  for (auto& b : c.buckets) b.pending = static_cast<int>(b.parameters.size());
}

void BucketReducer::ready(models::Parameter* parameter) {
  auto& c = *core_;
  std::lock_guard lock(c.mutex);
  auto it = c.bucket_of.find(parameter);
  if (it == c.bucket_of.end() || c.seen[parameter]) return;
  c.seen[parameter] = true;
  if (--c.buckets[it->second].pending == 0) c.changed.notify_all();
}

void BucketReducer::Core::work() {
  std::unique_lock lock(mutex);
  while (true) {
    // A gather round comes before the next step's reductions, on every replica alike.
    const auto gather_due = [&] { return gathering && !gather_error && !aborted; };
    changed.wait(lock, [&] {
      return stopping || gather_due() ||
             (next < buckets.size() && !aborted && !error && !gather_error && !gathering && buckets[next].pending == 0);
    });
    if (gather_due()) {
      gather_next(lock);
      continue;
    }
    if (stopping) return;
    Bucket& bucket = buckets[next];
    const auto traced_step = step;
    const auto index = static_cast<int>(next);
    reducing = true;
    lock.unlock();
    const auto t0 = Clock::now();
    std::exception_ptr failed;
    try {
      // micro_batch holds the bucket's index in the trace.
      trace::ScopedSpan span(trace::SpanKind::AllReduce, track.stage, track.replica, traced_step, index, 0, 1);
      reduce(bucket);
    } catch (...) {
      failed = std::current_exception();
    }
    lock.lock();
    reducing = false;
    stats.reduce_seconds += seconds_since(t0);
    if (failed) error = failed;
    else ++next;
    changed.notify_all();
  }
}

void BucketReducer::Core::reduce(Bucket& bucket) {
  // Someone may have replaced a gradient tensor (a checkpoint load, a test): bring it home.
  std::int64_t at = 0;
  for (auto* p : bucket.parameters) {
    if (p->grad.raw() != static_cast<float*>(bucket.flat.raw()) + at) {
      auto home = bucket.flat.view(at, p->grad.shape());
      home.copy_from(p->grad);
      p->grad = home;
    }
    at += aligned_elements(p->grad.numel());
  }
  const float mean = 1.0f / static_cast<float>(collective->size());
  auto scale = [&](kernels::Tensor& t) {
    if (t.device().is_cpu()) {
      // A plain loop on this thread: an OpenMP team here would spin against the stage threads.
      float* v = t.data<float>();
      const std::int64_t n = t.numel();
      for (std::int64_t i = 0; i < n; ++i) v[i] *= mean;
    } else {
      kernels::scale_inplace(t, mean);
    }
  };
  // A 16-bit sum divides first: the mean of R gradients then has the range of one gradient, where
  // a sum-then-divide overflows fp16 on large gradients and rounds small ones away.
  if (options.compression != Compression::None) scale(bucket.flat);
  if (!bucket.sharded) {
    collective->allreduce_sum(bucket.flat, options.compression);
    if (options.compression == Compression::None) scale(bucket.flat);
    return;
  }
  collective->reduce_scatter_sum(bucket.flat, options.compression);
  if (options.compression == Compression::None) {
    auto owned = bucket.flat.view(collective->rank() * segment(bucket), {segment(bucket)});
    scale(owned);
  }
}

void BucketReducer::Core::gather_next(std::unique_lock<std::mutex>& lock) {
  const std::size_t item = gathered;
  const bool buffers = !followed_buffers.empty() && item == 0;
  const std::size_t index = buffers ? kNotGathered : gather_order[item - (followed_buffers.empty() ? 0 : 1)];
  const auto traced_step = gathered_step;
  reducing = true;
  lock.unlock();
  std::exception_ptr failed;
  try {
    // micro_batch holds the bucket's index in the trace (-1: the buffers).
    trace::ScopedSpan span(trace::SpanKind::AllGather, track.stage, track.replica, traced_step,
                           buffers ? -1 : static_cast<int>(index), 0, 1);
    if (buffers) {
      broadcast_buffers(*collective, followed_buffers, 0);
    } else {
      collective->all_gather(buckets[index].weights);
    }
  } catch (...) {
    failed = std::current_exception();
  }
  lock.lock();
  reducing = false;
  if (failed) {
    gather_error = failed;
  } else if (++gathered == gather_items()) {
    gathering = false;
  }
  changed.notify_all();
}

std::string BucketReducer::Core::describe_item(std::size_t item) const {
  std::ostringstream out;
  if (!followed_buffers.empty() && item == 0) {
    out << "the broadcast of the batch-norm statistics from replica 0";
  } else {
    const std::size_t index = gather_order[item - (followed_buffers.empty() ? 0 : 1)];
    const auto& b = buckets[index];
    out << "the all-gather of bucket " << index << " of " << buckets.size() << " (weights";
    constexpr std::size_t kNamed = 4;
    for (std::size_t k = 0; k < std::min(kNamed, b.parameters.size()); ++k)
      out << " '" << b.parameters[b.parameters.size() - 1 - k]->name << "'";   // in forward order
    if (b.parameters.size() > kNamed) out << " and " << b.parameters.size() - kNamed << " more";
    out << ")";
  }
  return out.str();
}

void BucketReducer::Core::wait_gathered(std::unique_lock<std::mutex>& lock, const std::vector<std::size_t>& needed,
                                        rpc::Deadline deadline, const std::string& who) {
  if (needed.empty()) return;
  // Items arrive in order: the last one needed arriving means all did.
  const bool arrived = changed.wait_until(lock, deadline, [&] {
    return !gathering || gathered > needed.back() || gather_error || aborted;
  });
  if (aborted) throw rpc::AbortedError(*aborted);
  if (gathering && gathered <= needed.back() && gather_error) std::rethrow_exception(gather_error);
  if (!arrived)
    throw rpc::TimeoutError("replica " + std::to_string(collective->rank()) + " of " +
                            std::to_string(collective->size()) + ", stage " + std::to_string(track.stage) + ": " + who +
                            " waited past the deadline for " +
                            describe_item(*std::lower_bound(needed.begin(), needed.end(), gathered)) +
                            " of the weights updated in step " + std::to_string(gathered_step) + " (" +
                            std::to_string(gathered) + " of " + std::to_string(gather_items()) +
                            " gathered so far)");
}

void BucketReducer::finish(rpc::Deadline deadline) {
  auto& c = *core_;
  const auto t0 = Clock::now();
  std::unique_lock lock(c.mutex);
  // Gradients the hooks did not report (a parameter outside every child) are final by now.
  for (auto& b : c.buckets) b.pending = 0;
  c.changed.notify_all();
  const bool done = c.changed.wait_until(
      lock, deadline, [&] { return c.next == c.buckets.size() || c.error || c.gather_error || c.aborted; });
  c.stats.exposed_seconds = seconds_since(t0);
  if (c.aborted) throw rpc::AbortedError(*c.aborted);
  if (c.gather_error) std::rethrow_exception(c.gather_error);
  if (c.error) std::rethrow_exception(c.error);
  if (!done && c.gathering)
    throw rpc::TimeoutError("replica " + std::to_string(c.collective->rank()) + " of " +
                            std::to_string(c.collective->size()) + ", stage " + std::to_string(c.track.stage) +
                            ", step " + std::to_string(c.step) + ": the gradients waited past the deadline for " +
                            c.describe_item(c.gathered) + " of the weights updated in step " +
                            std::to_string(c.gathered_step));
  if (!done)
    throw rpc::TimeoutError("replica " + std::to_string(c.collective->rank()) + " of " +
                            std::to_string(c.collective->size()) + ": the gradient all-reduce of bucket " +
                            std::to_string(c.next) + " of " + std::to_string(c.buckets.size()) +
                            " did not finish before the deadline");
}

void BucketReducer::abort(const std::string& reason) {
  auto& c = *core_;
  {
    std::lock_guard lock(c.mutex);
    if (c.aborted) return;
    c.aborted = reason;
  }
  // A reduction in flight may still end early if the collective can be cancelled.
  c.collective->cancel();
  c.changed.notify_all();
}

std::optional<pipeline::UpdateShare> BucketReducer::update_share() const { return core_->share; }

pipeline::UpdateShare BucketReducer::Core::share_of_this_replica() const {
  const auto& c = *this;
  pipeline::UpdateShare share;
  for (const auto& b : c.buckets) {
    if (!b.sharded) {
      share.whole.insert(share.whole.end(), b.parameters.begin(), b.parameters.end());
      continue;
    }
    const std::int64_t lo = c.collective->rank() * c.segment(b), hi = lo + c.segment(b);
    std::int64_t at = 0;
    for (auto* p : b.parameters) {
      const std::int64_t n = p->value.numel();
      const std::int64_t begin = std::max(at, lo), end = std::min(at + n, hi);
      if (end > begin)
        share.owned.push_back({p, begin - at, end - begin,
                               b.masters.defined() ? b.masters.view(begin - lo, {end - begin}) : kernels::Tensor()});
      at += aligned_elements(n);
    }
  }
  return share;
}

void BucketReducer::follow_replica_zero(std::vector<models::Buffer*> buffers) {
  auto& c = *core_;
  std::lock_guard lock(c.mutex);
  PW_CHECK(c.share && !c.gathering && c.step < 0,
           "buffers follow replica 0 through the weight gathers of sharded state, set before the first step");
  c.followed_buffers = std::move(buffers);
}

void BucketReducer::start_gathering_weights() {
  auto& c = *core_;
  if (!c.share) return;
  {
    std::lock_guard lock(c.mutex);
    if (c.aborted) return;   // the next wait reports it
    if (c.gather_error) std::rethrow_exception(c.gather_error);
    PW_CHECK(!c.gathering, "replica " << c.collective->rank() << ", stage " << c.track.stage << ", step " << c.step
                                      << ": the weights were updated again before the last update's gather ended");
  }
  // The thread touches no weight while no round is under way.
  for (auto& b : c.buckets) {
    if (!b.sharded) continue;
    // Someone may have replaced a weight tensor (a test): its values go home first.
    std::int64_t at = 0;
    const auto element_bytes = static_cast<std::int64_t>(kernels::dtype_size(b.weight_dtype));
    for (auto* p : b.parameters) {
      if (p->value.raw() != static_cast<char*>(b.weights.raw()) + at * element_bytes) {
        auto home = b.weights.view(at, p->value.shape());
        home.copy_from(p->value.to(b.weight_dtype));
        p->value = home;
        if (b.masters.defined()) p->compute = home;
      }
      at += aligned_elements(p->value.numel());
    }
  }
  {
    std::lock_guard lock(c.mutex);
    c.gathered = 0;
    c.gathered_step = c.step;
    c.gathering = c.gather_items() > 0;
  }
  c.changed.notify_all();
}

void BucketReducer::await_weights(models::Layer& layer, const std::string& name, rpc::Deadline deadline) {
  auto& c = *core_;
  {
    std::lock_guard lock(c.mutex);
    if (!c.gathering) return;
  }
  const std::vector<std::size_t>* needed = nullptr;
  {
    std::lock_guard lock(c.mutex);
    if (const auto it = c.items_of_layer.find(&layer); it != c.items_of_layer.end()) needed = &it->second;
  }
  if (needed == nullptr) {
    // The buckets and the buffers are fixed by now: the lookup runs without the lock, once per layer.
    const std::size_t offset = c.followed_buffers.empty() ? 0 : 1;
    std::vector<std::size_t> items;
    if (offset == 1 && !layer.named_buffers().empty()) items.push_back(0);
    for (auto* p : layer.parameters()) {
      const auto it = c.bucket_of.find(p);
      if (it != c.bucket_of.end() && c.gather_position[it->second] != Core::kNotGathered)
        items.push_back(offset + c.gather_position[it->second]);
    }
    std::sort(items.begin(), items.end());
    items.erase(std::unique(items.begin(), items.end()), items.end());
    std::lock_guard lock(c.mutex);
    needed = &c.items_of_layer.emplace(&layer, std::move(items)).first->second;   // map nodes never move
  }
  std::unique_lock lock(c.mutex);
  c.wait_gathered(lock, *needed, deadline, "layer '" + name + "'");
}

void BucketReducer::await_all_weights(rpc::Deadline deadline) {
  auto& c = *core_;
  std::unique_lock lock(c.mutex);
  if (c.gather_error) std::rethrow_exception(c.gather_error);
  if (!c.gathering) return;
  std::vector<std::size_t> every(c.gather_items());
  for (std::size_t i = 0; i < every.size(); ++i) every[i] = i;
  c.wait_gathered(lock, every, deadline, "reading every weight");
}

kernels::Tensor BucketReducer::Core::gathered_segments(const Bucket& b, const kernels::Tensor& mine) {
  PW_CHECK(mine.numel() == segment(b) && mine.dtype() == kernels::DType::F32,
           "a bucket segment of " << segment(b) << " F32 values, got " << mine.describe());
  const auto device = b.flat.device();
  const std::int64_t members = collective->size(), me = collective->rank(), n = segment(b);
  // Host memory held for the device, outside its cap: what a checkpoint gathers there would
  // otherwise need room beside the steady state.
  auto flat = kernels::Tensor::zeros_host({b.elements}, kernels::DType::F32, device);
  if (device.is_cpu()) {   // the collective works on this host memory itself (its device is `device`)
    flat.copy_elements_from(mine, 0, me * n, n);
    collective->all_gather(flat);
    return flat;
  }
  // A GPU collective needs device memory: the segments pass through a small device buffer, a
  // piece of every segment at a time, each piece of member r landing in member r's segment.
  const std::int64_t piece = std::max<std::int64_t>(
      1, std::min(n, kGatherChunkBytes / static_cast<std::int64_t>(sizeof(float)) / members));
  kernels::Tensor buffer;
  {
    kernels::MemoryKindScope kind(kernels::MemoryKind::Communication);
    buffer = kernels::Tensor::empty({members * piece}, kernels::DType::F32, device);
  }
  for (std::int64_t at = 0; at < n; at += piece) {
    const std::int64_t len = std::min(piece, n - at);
    auto pieces = len == piece ? buffer : buffer.view(0, {members * len});
    pieces.copy_elements_from(mine, at, me * len, len);
    collective->all_gather(pieces);
    for (std::int64_t r = 0; r < members; ++r) flat.copy_elements_from(pieces, r * len, r * n + at, len);
  }
  return flat;
}

std::map<models::Parameter*, kernels::Tensor> BucketReducer::gather_sharded(
    const std::function<kernels::Tensor(models::Parameter*)>& slice_state) {
  auto& c = *core_;
  std::map<models::Parameter*, kernels::Tensor> out;
  const auto share = update_share();
  if (!share) return out;
  c.check_no_gather("the optimizer state's gather");
  std::map<models::Parameter*, models::ParameterSlice> mine;
  for (const auto& slice : share->owned) mine.emplace(slice.parameter, slice);
  for (auto& b : c.buckets) {
    if (!b.sharded) continue;
    auto segment = kernels::Tensor::zeros_host({c.segment(b)}, kernels::DType::F32, b.flat.device());
    const std::int64_t lo = c.collective->rank() * c.segment(b);
    std::int64_t at = 0;
    for (auto* p : b.parameters) {
      const auto it = mine.find(p);
      if (it != mine.end()) {
        const kernels::Tensor state = slice_state(p);
        PW_CHECK(state.defined() && state.numel() == it->second.length && state.dtype() == kernels::DType::F32,
                 "sharded state of '" << p->name << "': expected " << it->second.length << " F32 values, got "
                                      << (state.defined() ? state.describe() : std::string("none")));
        segment.copy_elements_from(state, 0, at + it->second.offset - lo, it->second.length);
      }
      at += aligned_elements(p->value.numel());
    }
    const auto flat = c.gathered_segments(b, segment);
    at = 0;
    for (auto* p : b.parameters) {
      out.emplace(p, flat.view(at, p->value.shape()));   // host memory, kept by the views
      at += aligned_elements(p->value.numel());
    }
  }
  return out;
}

std::map<models::Parameter*, kernels::Tensor> BucketReducer::gather_masters() {
  auto& c = *core_;
  std::map<models::Parameter*, kernels::Tensor> out;
  c.check_no_gather("the master weights' gather");
  for (auto& b : c.buckets) {
    if (!b.masters.defined()) continue;
    const auto flat = c.gathered_segments(b, b.masters);
    std::int64_t at = 0;
    for (auto* p : b.parameters) {
      out.emplace(p, flat.view(at, p->value.shape()));
      at += aligned_elements(p->value.numel());
    }
  }
  return out;
}

std::size_t BucketReducer::bucket_count() const { return core_->buckets.size(); }

ReduceStats BucketReducer::stats() const {
  std::lock_guard lock(core_->mutex);
  return core_->stats;
}

}  // namespace pw::dp
