#include "dataparallel/link_collective.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "dataparallel/ring_layout.h"
#include "kernels/half_float.h"

namespace pw::dp {

namespace {

using Clock = std::chrono::steady_clock;
using kernels::DType;

// A wait is taken in slices this long, so that cancel() ends it promptly.
constexpr std::chrono::milliseconds kWaitSlice{20};
// How long cancel() waits for a call to leave the transport.
constexpr std::chrono::milliseconds kCancelGrace{1000};

// The element formats of a ring. Compressed sums go through float and round to nearest even,
// element by element, as Gloo's float16 and GlooCollective's bf16 sums do.
struct F32Format {
  using Value = float;
  static constexpr DType dtype = DType::F32;
  static Value add(Value a, Value b) { return a + b; }
};
struct F16Format {
  using Value = std::uint16_t;
  static constexpr DType dtype = DType::F16;
  static Value add(Value a, Value b) {
    return kernels::float_to_f16(kernels::f16_to_float(a) + kernels::f16_to_float(b));
  }
};
struct BF16Format {
  using Value = std::uint16_t;
  static constexpr DType dtype = DType::BF16;
  static Value add(Value a, Value b) {
    return kernels::float_to_bf16(kernels::bf16_to_float(a) + kernels::bf16_to_float(b));
  }
};

// all_gather's: bytes, copied and never added.
struct ByteFormat {
  using Value = std::uint8_t;
  static constexpr DType dtype = DType::U8;
  static Value add(Value, Value b) { return b; }
};

int index_of(const std::vector<int>& members, int rank, const std::string& name) {
  const auto at = std::find(members.begin(), members.end(), rank);
  PW_CHECK(at != members.end(), "rank " << rank << " is not a member of link group '" << name << "'");
  return static_cast<int>(at - members.begin());
}

// A fresh tensor holding `count` values from `from`: what a send hands over.
template <typename Value>
kernels::Tensor copy_of(const Value* from, std::int64_t count, DType dtype) {
  kernels::Tensor t = kernels::Tensor::empty({count}, dtype);
  std::memcpy(t.raw(), from, static_cast<std::size_t>(count) * sizeof(Value));
  return t;
}

void check_cpu(const kernels::Tensor& t, const char* what) {
  PW_CHECK(t.device().is_cpu(), what << " over the job's links needs a CPU tensor, got " << t.describe());
}

}  // namespace

// Counts a call inside the transport for cancel(); refuses to start one after cancel().
class LinkCollective::InTransport {
 public:
  InTransport(LinkCollective& c, const Piece& piece, int peer) : c_(c) {
    std::lock_guard lock(c_.mutex_);
    if (c_.cancelled_) throw rpc::AbortedError(c_.where(piece, peer) + ": the group was cancelled");
    ++c_.in_transport_;
  }
  ~InTransport() {
    {
      std::lock_guard lock(c_.mutex_);
      --c_.in_transport_;
    }
    c_.left_transport_.notify_all();
  }
  InTransport(const InTransport&) = delete;
  InTransport& operator=(const InTransport&) = delete;

 private:
  LinkCollective& c_;
};

int LinkCollective::group_id(std::string_view name) {
  std::uint32_t h = 2166136261u;
  for (const unsigned char ch : name) {
    h ^= ch;
    h *= 16777619u;
  }
  return static_cast<int>(h & 0x7fffffffu);
}

LinkCollective::LinkCollective(rpc::Transport& world, std::vector<int> members, std::string name,
                               std::chrono::milliseconds timeout, LinkCollectiveOptions options)
    : group_(world, members, index_of(members, world.rank(), name)), members_(std::move(members)),
      name_(std::move(name)), id_(group_id(name_)), timeout_(timeout), options_(options) {
  PW_CHECK(options_.chunk_bytes >= 2, "link group '" << name_ << "': chunks of " << options_.chunk_bytes << " bytes");
  PW_CHECK(timeout_.count() > 0, "link group '" << name_ << "': a timeout of " << timeout_.count() << " ms");
}

rpc::Tag LinkCollective::tag(const Piece& piece) const {
  return rpc::Tag{piece.operation, piece.message, rpc::PayloadKind::Collective, id_};
}

std::string LinkCollective::where(const Piece& piece, int peer) const {
  std::string out = "link group '" + name_ + "' (member " + std::to_string(rank()) + " of " + std::to_string(size()) +
                    "), " + piece.what + " " + std::to_string(piece.operation) + " (";
  if (*piece.phase != '\0') out += std::string(piece.phase) + " step " + std::to_string(piece.step) + ", ";
  out += "chunk " + std::to_string(piece.chunk) + "), with member " + std::to_string(peer) + " (rank " +
         std::to_string(members_[static_cast<std::size_t>(peer)]) + ")";
  return out;
}

// Called inside a catch block: the same kind of error, with `context` in front.
void LinkCollective::rethrow_with(const std::string& context) const {
  try {
    throw;
  } catch (const rpc::AbortedError& e) {
    throw rpc::AbortedError(context + ": " + e.what());
  } catch (const rpc::PeerLostError& e) {
    throw rpc::PeerLostError(context + ": " + e.what());
  } catch (const rpc::TimeoutError& e) {
    throw rpc::TimeoutError(context + ": " + e.what());
  } catch (const std::exception& e) {
    throw Error(context + ": " + e.what());
  }
}

void LinkCollective::send_piece(int peer, const Piece& piece, const kernels::Tensor& tensor) {
  InTransport inside(*this, piece, peer);
  try {
    group_.send(peer, tag(piece), tensor, Clock::now() + timeout_);
  } catch (...) {
    rethrow_with(where(piece, peer) + ", sending");
  }
}

kernels::Tensor LinkCollective::recv_piece(int peer, const Piece& piece, std::int64_t elements, DType dtype) {
  const auto deadline = Clock::now() + timeout_;
  kernels::Tensor got;
  while (!got.defined()) {
    InTransport inside(*this, piece, peer);
    try {
      got = group_.recv(peer, tag(piece), std::min(deadline, Clock::now() + kWaitSlice));
    } catch (const rpc::TimeoutError&) {
      if (Clock::now() >= deadline)
        throw rpc::TimeoutError(where(piece, peer) + ": no message from member " + std::to_string(peer) + " within " +
                                std::to_string(timeout_.count()) + " ms");
    } catch (...) {
      rethrow_with(where(piece, peer) + ", receiving");
    }
  }
  if (got.dtype() != dtype || got.numel() != elements || got.ndim() != 1 || !got.device().is_cpu())
    throw Error(where(piece, peer) + ": member " + std::to_string(peer) + " sent " + got.describe() + ", expected " +
                std::to_string(elements) + " " + kernels::dtype_name(dtype) +
                " values (do the members run the same operations on the same tensors?)");
  return got;
}

template <typename Format>
void LinkCollective::ring(typename Format::Value* values, std::int64_t elements, std::int64_t operation, RingPlan plan) {
  using Value = typename Format::Value;
  const int n = size(), me = rank() + plan.shift;
  const int right = (rank() + 1) % n, left = (rank() + n - 1) % n;
  const RingLayout layout(elements, n, std::max<std::int64_t>(1, options_.chunk_bytes / std::int64_t{sizeof(Value)}));
  const int chunks = layout.chunks_per_segment();
  // Reduce-scatter: at step s, send segment me-s (summed over s+1 members so far) to the right,
  // and add the left's segment me-s-1 into ours. After n-1 steps segment me+1 holds the sum.
  // All-gather: at step s, pass on the summed segment me+1-s and take segment me-s.
  for (int phase = 0; phase < 2; ++phase) {
    const bool reduce = phase == 0;
    if ((reduce && !plan.reduce) || (!reduce && !plan.gather)) continue;
    for (int s = 0; s < n - 1; ++s) {
      const int send_segment = reduce ? me - s : me + 1 - s;
      const int recv_segment = reduce ? me - s - 1 : me - s;
      for (int c = 0; c < chunks; ++c) {
        const Piece piece{operation, plan.what, reduce ? "reduce-scatter" : "all-gather", s, c,
                          (phase * (n - 1) + s) * chunks + c};
        const ElementRange out = layout.chunk(send_segment, c);
        if (out.count > 0) send_piece(right, piece, copy_of(values + out.begin, out.count, Format::dtype));
        const ElementRange in = layout.chunk(recv_segment, c);
        if (in.count == 0) continue;
        const kernels::Tensor got = recv_piece(left, piece, in.count, Format::dtype);
        const Value* from = got.data<Value>();
        Value* to = values + in.begin;
        if (reduce) {
          for (std::int64_t i = 0; i < in.count; ++i) to[i] = Format::add(to[i], from[i]);
        } else {
          std::memcpy(to, from, static_cast<std::size_t>(in.count) * sizeof(Value));
        }
      }
    }
  }
}

void LinkCollective::compressed_ring(kernels::Tensor& data, Compression compression, std::int64_t operation,
                                     RingPlan plan) {
  const std::int64_t n = data.numel();
  float* values = data.data<float>();
  if (compression == Compression::None) return ring<F32Format>(values, n, operation, plan);
  std::vector<std::uint16_t> packed(static_cast<std::size_t>(n));
  if (compression == Compression::Fp16) {
    for (std::int64_t i = 0; i < n; ++i) packed[static_cast<std::size_t>(i)] = kernels::float_to_f16(values[i]);
    ring<F16Format>(packed.data(), n, operation, plan);
    for (std::int64_t i = 0; i < n; ++i) values[i] = kernels::f16_to_float(packed[static_cast<std::size_t>(i)]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) packed[static_cast<std::size_t>(i)] = kernels::float_to_bf16(values[i]);
    ring<BF16Format>(packed.data(), n, operation, plan);
    for (std::int64_t i = 0; i < n; ++i) values[i] = kernels::bf16_to_float(packed[static_cast<std::size_t>(i)]);
  }
}

void LinkCollective::allreduce_sum(kernels::Tensor& data, Compression compression) {
  check_cpu(data, "all-reduce");
  PW_CHECK(data.dtype() == DType::F32, "all-reduce of " << data.describe() << "; expected F32");
  const std::int64_t operation = next_operation_++;
  if (size() == 1 || data.numel() == 0) return;
  compressed_ring(data, compression, operation, RingPlan{});
}

void LinkCollective::reduce_scatter_sum(kernels::Tensor& data, Compression compression) {
  check_cpu(data, "reduce-scatter");
  PW_CHECK(data.dtype() == DType::F32, "reduce-scatter of " << data.describe() << "; expected F32");
  PW_CHECK(data.numel() % size() == 0, "reduce-scatter of " << data.numel() << " elements over " << size()
                                                            << " members: not a multiple");
  const std::int64_t operation = next_operation_++;
  if (size() == 1 || data.numel() == 0) return;
  compressed_ring(data, compression, operation, RingPlan{"reduce-scatter", true, false, -1});
}

void LinkCollective::all_gather(kernels::Tensor& data) {
  check_cpu(data, "all-gather");
  PW_CHECK(data.numel() % size() == 0, "all-gather of " << data.numel() << " elements over " << size()
                                                        << " members: not a multiple");
  const std::int64_t operation = next_operation_++;
  if (size() == 1 || data.numel() == 0) return;
  // Bytes: equal segments of a whole number of elements, whatever the dtype.
  ring<ByteFormat>(static_cast<std::uint8_t*>(data.raw()), static_cast<std::int64_t>(data.nbytes()), operation,
                   RingPlan{"all-gather", false, true, -1});
}

void LinkCollective::broadcast(kernels::Tensor& data, int root) {
  check_cpu(data, "broadcast");
  PW_CHECK(root >= 0 && root < size(), "link group '" << name_ << "': broadcast from member " << root << " of "
                                                      << size());
  const std::int64_t operation = next_operation_++;
  if (size() == 1 || data.nbytes() == 0) return;
  // A chain from the root around the ring, chunk after chunk: member root+k receives from
  // root+k-1 and passes each chunk on before the next arrives.
  const int n = size(), position = (rank() - root + n) % n;
  const int right = (rank() + 1) % n, left = (rank() + n - 1) % n;
  const auto bytes = static_cast<std::int64_t>(data.nbytes());
  const std::int64_t pieces = piece_count(bytes, options_.chunk_bytes);
  PW_CHECK(pieces <= std::numeric_limits<int>::max(), "broadcast of " << bytes << " bytes: too many chunks");
  auto* base = static_cast<std::uint8_t*>(data.raw());
  for (std::int64_t p = 0; p < pieces; ++p) {
    const std::int64_t begin = p * options_.chunk_bytes;
    const std::int64_t count = std::min(options_.chunk_bytes, bytes - begin);
    const Piece piece{operation, "broadcast", "", 0, static_cast<int>(p), static_cast<int>(p)};
    kernels::Tensor chunk;
    if (position == 0) {
      chunk = copy_of(base + begin, count, DType::U8);
    } else {
      chunk = recv_piece(left, piece, count, DType::U8);
      std::memcpy(base + begin, chunk.raw(), static_cast<std::size_t>(count));
    }
    if (position < n - 1) send_piece(right, piece, chunk);   // never written to again
  }
}

void LinkCollective::cancel() noexcept {
  try {
    std::unique_lock lock(mutex_);
    cancelled_ = true;
    left_transport_.wait_for(lock, kCancelGrace, [this] { return in_transport_ == 0; });
  } catch (...) {
  }
}

}  // namespace pw::dp
