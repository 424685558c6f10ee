#include "dataparallel/gloo_collective.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <immintrin.h>

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
                               std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), prefix_(std::move(prefix)), timeout_(timeout) {
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

void GlooCollective::allreduce_sum(kernels::Tensor& data, Compression compression) {
  check_flat_cpu(data, "allreduce");
  PW_CHECK(data.dtype() == kernels::DType::F32, "allreduce of " << data.describe() << "; expected F32");
  if (size_ == 1 || data.numel() == 0) return;
  const auto n = static_cast<std::size_t>(data.numel());
  float* values = data.data<float>();
  const auto tag = next_tag_++;
  guarded("all-reduce", [&] {
    if (compression == Compression::Fp16) {
      std::vector<gloo::float16> half(n);
      to_half(values, half.data(), n);
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(half.data(), n);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<gloo::float16>));
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
      from_half(half.data(), values, n);
    } else if (compression == Compression::Bf16) {
      std::vector<std::uint16_t> packed(n);
      for (std::size_t i = 0; i < n; ++i) packed[i] = kernels::float_to_bf16(values[i]);
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(packed.data(), n);
      opts.setReduceFunction(&sum_bf16);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
      for (std::size_t i = 0; i < n; ++i) values[i] = kernels::bf16_to_float(packed[i]);
    } else {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(values, n);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    }
  });
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
  using Sum = void (*)(void*, const void*, const void*, size_t);
  // One reduce per segment, rooted at the segment's member (Debian's Gloo has no reduce-scatter
  // with options, tags and timeouts); each takes its own tag.
  auto reduce_segments = [&](auto* packed, Sum sum) {
    for (int root = 0; root < size_; ++root) {
      gloo::ReduceOptions opts(context_);
      opts.setOutput(packed + static_cast<std::size_t>(root) * segment, segment);
      opts.setRoot(root);
      opts.setReduceFunction(sum);
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      gloo::reduce(opts);
    }
  };
  float* mine = values + static_cast<std::size_t>(rank_) * segment;
  guarded("reduce-scatter", [&] {
    if (compression == Compression::Fp16) {
      std::vector<gloo::float16> half(n);
      to_half(values, half.data(), n);
      reduce_segments(half.data(), static_cast<Sum>(&gloo::sum<gloo::float16>));
      from_half(half.data() + static_cast<std::size_t>(rank_) * segment, mine, segment);
    } else if (compression == Compression::Bf16) {
      std::vector<std::uint16_t> packed(n);
      for (std::size_t i = 0; i < n; ++i) packed[i] = kernels::float_to_bf16(values[i]);
      reduce_segments(packed.data(), &sum_bf16);
      for (std::size_t i = 0; i < segment; ++i)
        mine[i] = kernels::bf16_to_float(packed[static_cast<std::size_t>(rank_) * segment + i]);
    } else {
      reduce_segments(values, static_cast<Sum>(&gloo::sum<float>));
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
