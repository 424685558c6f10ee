#include "dataparallel/gloo_collective.h"

#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <vector>

#include "core/error.h"
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

void check_flat_cpu(const kernels::Tensor& t, const char* what) {
  PW_CHECK(t.device().is_cpu(), what << " over Gloo needs a CPU tensor, got " << t.describe());
}

}  // namespace

Compression parse_compression(const std::string& text) {
  if (text == "none") return Compression::None;
  if (text == "fp16") return Compression::Fp16;
  throw InputError("unknown gradient compression '" + text + "'; accepted: none, fp16");
}

const char* compression_name(Compression c) { return c == Compression::Fp16 ? "fp16" : "none"; }

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
      for (std::size_t i = 0; i < n; ++i) half[i] = gloo::cpu_float2half_rn(values[i]);
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(half.data(), n);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<gloo::float16>));
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
      for (std::size_t i = 0; i < n; ++i) values[i] = gloo::cpu_half2float(half[i]);
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
