#include "dataparallel/gloo_collective.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/types.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/half_float.h"
#include "rpc/transport.h"

namespace pw::dp {

namespace {

// Gloo's store interface over ours, with the group's prefix.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(rpc::Store& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const auto value = store_.get(prefix_ + key, std::chrono::steady_clock::now() + timeout_);
    return {value.begin(), value.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const auto& key : keys) store_.get(prefix_ + key, deadline);
  }

 private:
  rpc::Store& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

// fp16 packing: the F16C instructions where the CPU has them (8 values per instruction), else
// Gloo's scalar conversion.
__attribute__((target("f16c,avx"))) void to_half_f16c(const float* in, gloo::float16* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = gloo::cpu_float2half_rn(in[i]);
}

__attribute__((target("f16c,avx"))) void from_half_f16c(const gloo::float16* in, float* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = gloo::cpu_half2float(in[i]);
}

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

void to_half(const float* in, gloo::float16* out, std::size_t n) {
  if (has_f16c()) return to_half_f16c(in, out, n);
  for (std::size_t i = 0; i < n; ++i) out[i] = gloo::cpu_float2half_rn(in[i]);
}

void from_half(const gloo::float16* in, float* out, std::size_t n) {
  if (has_f16c()) return from_half_f16c(in, out, n);
  for (std::size_t i = 0; i < n; ++i) out[i] = gloo::cpu_half2float(in[i]);
}

// bf16 sums for Gloo: each element through float, rounded to nearest even (kernels/half_float.h).
void sum_bf16(void* c, const void* a, const void* b, std::size_t n) {
  auto* out = static_cast<std::uint16_t*>(c);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = kernels::float_to_bf16(kernels::bf16_to_float(x[i]) + kernels::bf16_to_float(y[i]));
}

void check_flat_cpu(const kernels::Tensor& t, const char* what) {
  PW_CHECK(t.device().is_cpu(), what << " over Gloo needs a CPU tensor, got " << t.describe());
}

}  // namespace

Compression parse_compression(const std::string& text) { return parse_enum<Compression>(text); }

const char* compression_name(Compression c) { return enum_name(c).data(); }   // the table's names are literals

GlooCollective::GlooCollective(int rank, int size, rpc::Store& store, std::string prefix, const std::string& bind_host,
                               std::chrono::milliseconds timeout, GlooCollectiveOptions options)
    : rank_(rank), size_(size), prefix_(std::move(prefix)), timeout_(timeout), options_(options) {
  PW_CHECK(options_.exchange_chunk_bytes >= 16, "Gloo group '" << prefix_ << "': exchange chunks of "
                                                               << options_.exchange_chunk_bytes << " bytes; at least 16");
  PW_CHECK(size >= 1 && rank >= 0 && rank < size, "Gloo group '" << prefix_ << "': rank " << rank << " of " << size);
  gloo::transport::tcp::attr attr(bind_host.c_str());
  auto device = gloo::transport::tcp::CreateDevice(attr);
  context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context_->setTimeout(timeout);
  StoreAdapter adapter(store, prefix_, timeout);
  guarded("connecting", [&] { context_->connectFullMesh(adapter, device); });
}

GlooCollective::~GlooCollective() = default;

template <typename Op>
void GlooCollective::guarded(const char* what, Op op) {
  try {
    op();
  } catch (const rpc::TimeoutError& e) {
    throw rpc::TimeoutError("Gloo group '" + prefix_ + "' (member " + std::to_string(rank_) + " of " +
                            std::to_string(size_) + "), " + what + ": " + e.what());
  } catch (const gloo::IoException& e) {
    throw rpc::TimeoutError("Gloo group '" + prefix_ + "' (member " + std::to_string(rank_) + " of " +
                            std::to_string(size_) + "), " + what + ": a member did not answer: " + e.what());
  } catch (const std::exception& e) {
    throw Error("Gloo group '" + prefix_ + "' (member " + std::to_string(rank_) + " of " + std::to_string(size_) +
                "), " + what + ": " + e.what());
  }
}

namespace {

// n elements cut into one segment per member, each ceil(n / members) long (the last ones shorter,
// or empty when n < members), and each segment into chunks of at most `chunk` elements.
struct RingLayout {
  std::size_t n, members, chunk;
  std::size_t per() const { return (n + members - 1) / members; }
  std::size_t begin(std::size_t segment) const { return std::min(n, segment * per()); }
  std::size_t length(std::size_t segment) const { return std::min(n, (segment + 1) * per()) - begin(segment); }
  std::size_t chunks(std::size_t segment) const { return (length(segment) + chunk - 1) / chunk; }
  std::size_t max_chunks() const { return (per() + chunk - 1) / chunk; }
  std::size_t chunk_begin(std::size_t segment, std::size_t c) const { return begin(segment) + c * chunk; }
  std::size_t chunk_length(std::size_t segment, std::size_t c) const {
    return std::min(chunk, length(segment) - c * chunk);
  }
};

void completed(bool done, const char* what) {
  if (!done) throw Error(std::string("the reduce-scatter's ") + what + " was aborted");
}

}  // namespace

// Below ring_min_bytes Gloo's own all-reduce (its algorithms for few bytes take fewer steps than a
// ring's 2 (R - 1)); from there on the ring reduce-scatter below, then Gloo's in-place allgatherv of
// the segments (Gloo's all-reduce of 12.6 MB among 4 threads here took 41 ms, the two halves 32).
// The sums are then in the reduce-scatter's order, so for buckets of ring_min_bytes or more a
// sharded job's owned segments get the bits of the plain job's for any replica count.
void GlooCollective::allreduce_sum(kernels::Tensor& data, Compression compression) {
  check_flat_cpu(data, "allreduce");
  PW_CHECK(data.dtype() == kernels::DType::F32, "allreduce of " << data.describe() << "; expected F32");
  if (size_ == 1 || data.numel() == 0) return;
  const auto n = static_cast<std::size_t>(data.numel());
  float* values = data.data<float>();
  const bool ring = data.nbytes() >= options_.ring_min_bytes;
  const auto reduce = [&](auto* packed, SumFunction sum) {
    if (ring) {
      ring_reduce_scatter(packed, sizeof(*packed), n, sum);
      const RingLayout layout{n, static_cast<std::size_t>(size_), 1};
      std::vector<std::size_t> counts;
      for (int m = 0; m < size_; ++m) counts.push_back(layout.length(static_cast<std::size_t>(m)));
      gloo::AllgathervOptions gather(context_);
      gather.setOutput(packed, counts);
      gather.setTag(next_tag_++);
      gather.setTimeout(timeout_);
      gloo::allgatherv(gather);
      return;
    }
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(packed, n);
    opts.setReduceFunction(sum);
    opts.setTag(next_tag_++);
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  };
  guarded("all-reduce", [&] {
    if (compression == Compression::Fp16) {
      std::vector<gloo::float16> half(n);
      to_half(values, half.data(), n);
      reduce(half.data(), static_cast<SumFunction>(&gloo::sum<gloo::float16>));
      from_half(half.data(), values, n);
    } else if (compression == Compression::Bf16) {
      std::vector<std::uint16_t> packed(n);
      for (std::size_t i = 0; i < n; ++i) packed[i] = kernels::float_to_bf16(values[i]);
      reduce(packed.data(), &sum_bf16);
      for (std::size_t i = 0; i < n; ++i) values[i] = kernels::bf16_to_float(packed[i]);
    } else {
      reduce(values, static_cast<SumFunction>(&gloo::sum<float>));
    }
  });
}

// Ring reduce-scatter over Gloo's pairs (Debian's Gloo has no reduce-scatter with options, tags and
// timeouts; R rooted reduces, each a reduce-scatter and a gather inside Gloo, took 1.25x the whole
// all-reduce). Member r owns segment r. In step k = 0..R-2 member r sends its partial sum of
// segment r-1-k to member r+1 and receives segment r-2-k from member r-1, adding its own values with
// `sum` (the element function of the all-reduce) in place; after R-1 steps it holds the total of
// segment r, summed in the order r+1, r+2, ..., r. Each member sends (R-1)/R of the buffer, straight
// out of it (Gloo's unbound buffers send any byte range). Segments travel in chunks of at most
// `exchange_chunk_bytes`, received into two alternating scratch chunks: a chunk summed in step k
// goes on to step k+1 while the next one arrives.
void GlooCollective::ring_reduce_scatter(void* data, std::size_t element_bytes, std::size_t n, SumFunction sum) {
  auto* bytes = static_cast<char*>(data);
  const auto members = static_cast<std::size_t>(size_);
  const RingLayout ring{n, members, std::max<std::size_t>(1, options_.exchange_chunk_bytes / element_bytes)};
  const std::size_t per_step = ring.max_chunks();
  const std::uint32_t first_tag = next_tag_;
  next_tag_ += static_cast<std::uint32_t>((members - 1) * per_step);
  const auto slot = [&](std::size_t step, std::size_t c) {
    return static_cast<std::uint64_t>(
        gloo::Slot::build(kRingSlotPrefix, first_tag + static_cast<std::uint32_t>(step * per_step + c)));
  };
  const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
  const auto segment_at = [&](std::size_t step, std::size_t back) {   // segment (r - back - step) mod R
    return (static_cast<std::size_t>(rank_) + 2 * members - back - step) % members;
  };
  auto whole = context_->createUnboundBuffer(bytes, n * element_bytes);
  const std::size_t scratch_bytes = ring.chunk * element_bytes;
  std::vector<char> scratch(2 * scratch_bytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> inbox[2] = {
      context_->createUnboundBuffer(scratch.data(), scratch_bytes),
      context_->createUnboundBuffer(scratch.data() + scratch_bytes, scratch_bytes)};
  // The group's timeout bounds the whole reduce-scatter, not each of its waits.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  const auto remaining = [&] {
    return std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                      deadline - std::chrono::steady_clock::now()));
  };
  std::size_t sends = 0;
  const auto send = [&](std::size_t step, std::size_t segment, std::size_t c) {
    whole->send(right, slot(step, c), ring.chunk_begin(segment, c) * element_bytes,
                ring.chunk_length(segment, c) * element_bytes);
    ++sends;
  };
  for (std::size_t c = 0; c < ring.chunks(segment_at(0, 1)); ++c) send(0, segment_at(0, 1), c);
  // What arrives, in order: step k's chunks of segment r-2-k (the same segment left sends in step k).
  std::vector<std::pair<std::size_t, std::size_t>> units;
  for (std::size_t step = 0; step + 1 < members; ++step)
    for (std::size_t c = 0; c < ring.chunks(segment_at(step, 2)); ++c) units.emplace_back(step, c);
  const auto post_receive = [&](std::size_t u) {
    const auto [step, c] = units[u];
    inbox[u % 2]->recv(left, slot(step, c), 0, ring.chunk_length(segment_at(step, 2), c) * element_bytes);
  };
  if (!units.empty()) post_receive(0);
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (u + 1 < units.size()) post_receive(u + 1);
    completed(inbox[u % 2]->waitRecv(remaining()), "receive");
    const auto [step, c] = units[u];
    const std::size_t segment = segment_at(step, 2);
    char* own = bytes + ring.chunk_begin(segment, c) * element_bytes;
    sum(own, scratch.data() + (u % 2) * scratch_bytes, own, ring.chunk_length(segment, c));
    if (step + 2 < members) send(step + 1, segment, c);
  }
  for (std::size_t k = 0; k < sends; ++k) completed(whole->waitSend(remaining()), "send");
}

void GlooCollective::reduce_scatter_sum(kernels::Tensor& data, Compression compression) {
  check_flat_cpu(data, "reduce-scatter");
  PW_CHECK(data.dtype() == kernels::DType::F32, "reduce-scatter of " << data.describe() << "; expected F32");
  PW_CHECK(data.numel() % size_ == 0,
           "reduce-scatter of " << data.numel() << " elements over " << size_ << " members: not a multiple");
  if (size_ == 1 || data.numel() == 0) return;
  const auto n = static_cast<std::size_t>(data.numel());
  const std::size_t segment = n / static_cast<std::size_t>(size_);
  float* values = data.data<float>();
  float* mine = values + static_cast<std::size_t>(rank_) * segment;
  guarded("reduce-scatter", [&] {
    if (compression == Compression::Fp16) {
      std::vector<gloo::float16> half(n);
      to_half(values, half.data(), n);
      ring_reduce_scatter(half.data(), sizeof(gloo::float16), n,
                              static_cast<SumFunction>(&gloo::sum<gloo::float16>));
      from_half(half.data() + static_cast<std::size_t>(rank_) * segment, mine, segment);
    } else if (compression == Compression::Bf16) {
      std::vector<std::uint16_t> packed(n);
      for (std::size_t i = 0; i < n; ++i) packed[i] = kernels::float_to_bf16(values[i]);
      ring_reduce_scatter(packed.data(), sizeof(std::uint16_t), n, &sum_bf16);
      for (std::size_t i = 0; i < segment; ++i)
        mine[i] = kernels::bf16_to_float(packed[static_cast<std::size_t>(rank_) * segment + i]);
    } else {
      ring_reduce_scatter(values, sizeof(float), n, static_cast<SumFunction>(&gloo::sum<float>));
    }
  });
}

void GlooCollective::all_gather(kernels::Tensor& data) {
  check_flat_cpu(data, "all-gather");
  PW_CHECK(data.numel() % size_ == 0,
           "all-gather of " << data.numel() << " elements over " << size_ << " members: not a multiple");
  if (size_ == 1 || data.numel() == 0) return;
  const auto tag = next_tag_++;
  guarded("all-gather", [&] {
    // Without an input buffer Gloo gathers in place: this member's segment is already where it goes.
    gloo::AllgatherOptions opts(context_);
    opts.setOutput(static_cast<std::uint8_t*>(data.raw()), data.nbytes());
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

void GlooCollective::cancel() noexcept {
  try {
    context_->closeConnections();
  } catch (...) {
  }
}

void GlooCollective::broadcast(kernels::Tensor& data, int root) {
  check_flat_cpu(data, "broadcast");
  if (size_ == 1 || data.numel() == 0) return;
  const auto tag = next_tag_++;
  guarded("broadcast", [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<std::uint8_t*>(data.raw()), data.nbytes());
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

}  // namespace pw::dp
