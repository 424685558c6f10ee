#include "dataparallel/ps/embedding_bag.h"

#include <algorithm>
#include <limits>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "dataparallel/ps/client.h"

namespace pw::dp {

namespace {

using kernels::DType;
using kernels::Tensor;

struct PsBagContext : models::Context {
  models::UniqueIds unique;
  DType input_dtype = DType::I64;   // the input gradient's (zeros)
  Tensor grad_y;   // kept by the input half for the weight half (Layer keeps it only for layers with parameters)
};

Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(kernels::Device::cpu()); }

std::int64_t nanoseconds_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

}  // namespace

int server_staleness(UpdateMode update, int staleness) {
  switch (update) {
    case UpdateMode::Sync: return 1;
    case UpdateMode::Bounded: return staleness;
    case UpdateMode::Async: return -1;
  }
  return -1;
}

PsEmbeddingBag::PsEmbeddingBag(PsBagOptions options)
    : o_(std::move(options)) {
  check_table_config(o_.table);
  PW_INPUT_CHECK(!o_.servers.empty(), "embedding table '" << o_.table.name << "' needs at least one parameter server");
  PW_INPUT_CHECK(o_.bag_size >= 1, "embedding table '" << o_.table.name << "': bag size " << o_.bag_size
                                                       << "; expected >= 1");
  PW_INPUT_CHECK(o_.update != UpdateMode::Bounded || o_.staleness >= 1,
                 "bounded staleness needs a staleness >= 1 (a pull of step t waits for step t - s; with s = 0 a "
                 "worker would wait for its own push), got "
                     << o_.staleness);
  PW_INPUT_CHECK(o_.staleness >= 0, "staleness " << o_.staleness << "; expected >= 0");
  if (!o_.traffic) o_.traffic = std::make_shared<PsTraffic>();
}

PsEmbeddingBag::~PsEmbeddingBag() {
  // The last push is not lost with the layer; a prefetch is no longer wanted.
  try {
    if (push_.pending()) wait_for_push("the layer is destroyed");
  } catch (const std::exception& e) {
    PW_LOG(Warn, "embedding table '" << o_.table.name << "': the last push failed: " << e.what());
  }
  for (auto& [step, p] : prefetches_) p.call.abandon(parked_);
  for (auto& t : parked_)
    if (t.joinable()) t.join();
}

std::chrono::steady_clock::time_point PsEmbeddingBag::background_deadline() const {
  // The call itself gives up after the client's timeout (plus the answer's slack); this is the
  // guard behind it.
  return std::chrono::steady_clock::now() + o_.timeout + std::chrono::seconds(5);
}

kernels::Shape PsEmbeddingBag::output_shape_impl(const kernels::Shape& input) const {
  PW_INPUT_CHECK(input.size() == 2 && input[1] == o_.bag_size,
                 "PsEmbeddingBag expects ids [batch, " << o_.bag_size << "], got " << kernels::shape_str(input));
  return {input[0], o_.table.dim};
}

void PsEmbeddingBag::start() {
  if (client_) return;
  {
    std::lock_guard lock(clients_mutex_);
    client_ = std::make_shared<PsClient>(o_.servers, o_.job_token, 0, o_.timeout, o_.tls);
    for (auto& c : prefetch_clients_) c = std::make_shared<PsClient>(o_.servers, o_.job_token, 0, o_.timeout, o_.tls);
    push_client_ = std::make_shared<PsClient>(o_.servers, o_.job_token, 0, o_.timeout, o_.tls);
    if (aborted_) {
      for (auto* c : {&client_, &prefetch_clients_[0], &prefetch_clients_[1], &push_client_}) (*c)->abort(*aborted_);
    }
  }
  client_->create_table(o_.table);
  // A job that comes back to servers holding an earlier run's rows continues where they stand (the
  // servers accept each worker's steps only in order, and take a repeat of a worker's last step as
  // done). Sync: after the last step applied everywhere. Async and bounded apply each worker's
  // pushes as they come, and a worker stopped with a push part-way out (on some shards, not
  // others) goes on from the step after the one every shard has of it.
  const auto shards = client_->stats(o_.table.name);
  std::int64_t applied = -1, own = std::numeric_limits<std::int64_t>::max();
  for (const auto& shard : shards) {
    applied = std::max(applied, shard.applied_through);
    const auto w = static_cast<std::size_t>(worker_);
    own = std::min(own, w < shard.last_pushed.size() ? shard.last_pushed[w] : shard.applied_through);
  }
  step_ = (o_.update == UpdateMode::Sync ? applied : own) + 1;
}

std::vector<float> PsEmbeddingBag::rows_of(const std::vector<std::int64_t>& keys, models::Mode mode) {
  const auto dim = static_cast<std::size_t>(o_.table.dim);
  std::vector<float> rows(keys.size() * dim);
  if (mode == models::Mode::Eval) {
    // Evaluation reads the servers as they are, without waiting for other workers (the engine
    // makes every rank's pushes answered first); this worker's own last push is answered first.
    if (push_.pending()) wait_for_push("evaluation");
    client_->pull(o_.table.name, o_.table.dim, keys, step_, -1, rows.data());
    o_.traffic->pulled_rows += static_cast<std::int64_t>(keys.size());
    return rows;
  }
  // Each row once a step: what the step's prefetch or an earlier read holds, the rest pulled.
  const std::vector<std::size_t> missing = held_rows(keys, rows.data());
  if (missing.empty()) return rows;
  std::vector<std::int64_t> pull_keys(missing.size());
  for (std::size_t i = 0; i < missing.size(); ++i) pull_keys[i] = keys[missing[i]];
  std::vector<float> pulled(pull_keys.size() * dim);
  {
    trace::ScopedSpan span(trace::SpanKind::PsPull, -1, 0, step_);
    const auto t0 = Clock::now();
    client_->pull(o_.table.name, o_.table.dim, pull_keys, step_, server_staleness(o_.update, o_.staleness),
                  pulled.data());
    const auto took = nanoseconds_since(t0);
    o_.traffic->pull_ns += took;
    o_.traffic->lookup_wait_ns += took;
    ++o_.traffic->lookup_waits;
    o_.traffic->pulled_rows += static_cast<std::int64_t>(pull_keys.size());
  }
  for (std::size_t i = 0; i < missing.size(); ++i)
    std::copy_n(pulled.data() + i * dim, dim, rows.data() + missing[i] * dim);
  keep_step_rows(pull_keys, pulled);
  return rows;
}

// Rows pulled during a step join its prefetched ones: a later read of the step (a recomputed
// forward of the same micro-batch, another micro-batch with the same ids) gets the rows this one
// got, as it would from a prefetch. Under asynchronous updates a second pull could see other
// workers' pushes, and a recomputed forward would then feed its layers other rows than the loss
// was computed from. Rows already held keep their values.
void PsEmbeddingBag::keep_step_rows(const std::vector<std::int64_t>& keys, const std::vector<float>& rows) {
  const auto dim = static_cast<std::size_t>(o_.table.dim);
  Prefetch& p = prefetches_[step_];
  PW_CHECK(p.complete || !p.call.pending(), "embedding table '" << o_.table.name << "': step " << step_
                                                                << "'s prefetch is still under way");
  p.step = step_;
  p.complete = true;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!p.index.try_emplace(keys[i], p.keys.size()).second) continue;
    p.keys.push_back(keys[i]);
    p.rows.insert(p.rows.end(), rows.begin() + static_cast<std::ptrdiff_t>(i * dim),
                  rows.begin() + static_cast<std::ptrdiff_t>((i + 1) * dim));
  }
}

void PsEmbeddingBag::prefetch(const std::vector<Tensor>& next_micro_batches) {
  start();
  const std::int64_t step = step_ + 1;   // the current step pushes before the next one's forward
  // Kept: the current step's own prefetch (made during the step before). Dropped: older ones, and
  // an earlier prefetch of the same step (the caller changed its mind).
  for (auto it = prefetches_.begin(); it != prefetches_.end();) {
    if (it->first == step_) {
      ++it;
      continue;
    }
    it->second.call.abandon(parked_);
    it = prefetches_.erase(it);
  }
  Prefetch& p = prefetches_[step];
  p.step = step;
  for (const Tensor& ids : next_micro_batches) {
    PW_INPUT_CHECK(ids.ndim() == 2 && ids.dtype() == DType::I64 && ids.dim(1) == o_.bag_size,
                   "PsEmbeddingBag '" << o_.table.name << "' prefetch expects I64 ids [batch, " << o_.bag_size
                                      << "], got " << ids.describe());
    const Tensor h = on_host(ids);
    const std::int64_t* v = h.data<std::int64_t>();
    for (std::int64_t i = 0; i < h.numel(); ++i)
      if (p.index.try_emplace(v[i], p.keys.size()).second) p.keys.push_back(v[i]);
  }
  if (p.keys.empty()) {
    p.complete = true;
    return;
  }
  p.call = BackgroundCall<std::vector<float>>(
      [client = prefetch_clients_[static_cast<std::size_t>(step % 2)], traffic = o_.traffic, table = o_.table.name, dim = o_.table.dim,
       keys = p.keys, step, staleness = server_staleness(o_.update, o_.staleness)] {
        trace::ScopedSpan span(trace::SpanKind::PsPull, -1, 0, step, -1, 0, 1);
        const auto t0 = Clock::now();
        auto rows = client->pull(table, dim, keys, step, staleness);
        traffic->pull_ns += nanoseconds_since(t0);
        traffic->pulled_rows += static_cast<std::int64_t>(keys.size());
        traffic->prefetched_rows += static_cast<std::int64_t>(keys.size());
        return rows;
      });
}

std::vector<std::size_t> PsEmbeddingBag::held_rows(const std::vector<std::int64_t>& keys, float* out) {
  std::vector<std::size_t> missing;
  const auto found = prefetches_.find(step_);
  if (found == prefetches_.end()) {
    missing.resize(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) missing[i] = i;
    return missing;
  }
  Prefetch& p = found->second;
  const auto dim = static_cast<std::size_t>(o_.table.dim);
  if (!p.complete) {
    const bool waited = !p.call.ready();
    const auto t0 = Clock::now();
    std::vector<float> pulled;
    {
      trace::ScopedSpan span(trace::SpanKind::PsPull, -1, 0, step_);
      pulled = p.call.take(background_deadline(), "embedding table '" + o_.table.name +
                                                              "': the prefetched rows of step " +
                                                              std::to_string(step_));
    }
    if (waited) {
      o_.traffic->lookup_wait_ns += nanoseconds_since(t0);
      ++o_.traffic->lookup_waits;
    }
    PW_CHECK(pulled.size() == p.keys.size() * dim,
             "embedding table '" << o_.table.name << "': a prefetch returned " << pulled.size() << " values for "
                                 << p.keys.size() << " rows of " << dim);
    p.rows = std::move(pulled);
    p.complete = true;
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto it = p.index.find(keys[i]);
    if (it == p.index.end()) missing.push_back(i);   // not among the ids it was given
    else std::copy_n(p.rows.data() + it->second * dim, dim, out + i * dim);
  }
  return missing;
}

void PsEmbeddingBag::wait_for_push(const char* why) {
  if (!push_.pending()) return;
  push_.take(background_deadline(), "embedding table '" + o_.table.name + "': the push of step " +
                                        std::to_string(step_ - 1) + " (waited for by " + why + ")");
}

void PsEmbeddingBag::flush() {
  if (push_.pending()) wait_for_push("flush");
}

void PsEmbeddingBag::abandon_background_calls() {
  for (auto& [step, p] : prefetches_) p.call.abandon(parked_);
  prefetches_.clear();
  push_.abandon(parked_);
}

models::Layer::Output PsEmbeddingBag::forward_impl(const Tensor& input, models::Mode mode) {
  const Tensor ids = models::bag_ids_of(input, o_.bag_size, "PsEmbeddingBag '" + o_.table.name + "'");
  start();
  auto ctx = std::make_unique<PsBagContext>();
  ctx->input_dtype = input.dtype();
  ctx->unique = models::unique_bag_ids(on_host(ids));
  const Tensor& unique = ctx->unique.ids;
  const std::vector<std::int64_t> keys(unique.data<std::int64_t>(), unique.data<std::int64_t>() + unique.numel());
  const auto u = static_cast<std::int64_t>(keys.size());
  const Tensor rows = Tensor::from_vector(rows_of(keys, mode), {u, o_.table.dim});
  Tensor y = models::bag_pool_forward(rows, ctx->unique.index, o_.mode).to(device_);
  return {std::move(y), std::move(ctx)};
}

Tensor PsEmbeddingBag::backward_input_impl(models::Context& ctx, const Tensor& grad_y) {
  auto& bag = static_cast<PsBagContext&>(ctx);
  bag.grad_y = grad_y;
  return Tensor::zeros(ctx.input_shape, bag.input_dtype, device_);
}

void PsEmbeddingBag::backward_weight_impl(models::Context& ctx, const Tensor& given) {
  auto& c = static_cast<PsBagContext&>(ctx);
  const Tensor& grad_y = given.defined() ? given : c.grad_y;
  PW_CHECK(grad_y.defined(), "PsEmbeddingBag '" << o_.table.name << "': weight half without an output gradient");
  const Tensor& unique = c.unique.ids;
  const Tensor grad_rows = on_host(models::bag_pool_backward(on_host(grad_y), c.unique.index, unique.dim(0), o_.mode));
  const auto dim = static_cast<std::size_t>(o_.table.dim);
  const float* g = grad_rows.data<float>();
  const std::int64_t* keys = unique.data<std::int64_t>();
  const auto scale = static_cast<float>(o_.gradient_scale);
  for (std::int64_t i = 0; i < unique.numel(); ++i) {
    auto& sum = pending_[keys[i]];
    if (sum.empty()) sum.assign(dim, 0.0f);
    const float* row = g + static_cast<std::size_t>(i) * dim;
    for (std::size_t j = 0; j < dim; ++j) sum[j] += row[j] * scale;
  }
  c.unique = {};
  c.grad_y = Tensor();
}

double PsEmbeddingBag::gradient_sum_of_squares() const {
  double sum = 0.0;
  for (const auto& [key, g] : pending_)
    for (float v : g) sum += static_cast<double>(v) * static_cast<double>(v);
  return sum;
}

void PsEmbeddingBag::scale_gradients(double factor) {
  for (auto& [key, g] : pending_)
    for (float& v : g) v = static_cast<float>(static_cast<double>(v) * factor);
}

PendingRows PsEmbeddingBag::pending_rows() const {
  PendingRows out;
  out.keys.reserve(pending_.size());
  out.rows.reserve(pending_.size() * static_cast<std::size_t>(o_.table.dim));
  for (const auto& [key, g] : pending_) {
    out.keys.push_back(key);
    out.rows.insert(out.rows.end(), g.begin(), g.end());
  }
  return out;
}

void PsEmbeddingBag::abort(const std::string& why) noexcept {
  std::lock_guard lock(clients_mutex_);
  if (aborted_) return;
  try {
    aborted_ = why;
  } catch (...) {
    return;
  }
  for (auto* c : {&client_, &prefetch_clients_[0], &prefetch_clients_[1], &push_client_})
    if (*c) (*c)->abort(why);
}

void PsEmbeddingBag::reconnect() {
  // The servers were restored: calls still under way belong to steps that no longer count.
  abandon_background_calls();
  std::lock_guard lock(clients_mutex_);
  aborted_.reset();   // a job of threads that recovered from a failed step goes on
  client_.reset();
  for (auto& c : prefetch_clients_) c.reset();
  push_client_.reset();
  step_ = -1;
  pending_.clear();
}

void PsEmbeddingBag::push_gradients(int worker, RemoteGradients what) {
  start();
  if (what == RemoteGradients::Discard) pending_.clear();
  const auto dim = static_cast<std::size_t>(o_.table.dim);
  std::vector<std::int64_t> keys;
  std::vector<float> grads;
  keys.reserve(pending_.size());
  grads.reserve(pending_.size() * dim);
  for (const auto& [key, g] : pending_) {
    keys.push_back(key);
    grads.insert(grads.end(), g.begin(), g.end());
  }
  // Each worker's steps reach the servers in order: the previous push must have been answered.
  if (push_.pending() && !push_.ready()) {
    const auto t0 = Clock::now();
    wait_for_push("the next push");
    o_.traffic->push_wait_ns += nanoseconds_since(t0);
    ++o_.traffic->push_waits;
  }
  wait_for_push("the next push");
  o_.traffic->pushed_rows += static_cast<std::int64_t>(keys.size());
  ++o_.traffic->pushes;
  // Every step is pushed, with or without rows, so the servers can count each worker's steps.
  push_ = BackgroundCall<int>([client = push_client_, traffic = o_.traffic, table = o_.table.name, dim = o_.table.dim,
                               keys = std::move(keys), grads = std::move(grads), step = step_, worker] {
    trace::ScopedSpan span(trace::SpanKind::PsPush, -1, worker, step, -1, 0, 1);
    const auto t0 = Clock::now();
    client->push(table, dim, keys, grads, step, worker);
    traffic->push_ns += nanoseconds_since(t0);
    return 0;
  });
  pending_.clear();
  if (auto done = prefetches_.find(step_); done != prefetches_.end()) {
    done->second.call.abandon(parked_);   // taken by now, unless the step read other ids
    prefetches_.erase(done);
  }
  ++step_;
}

}  // namespace pw::dp
