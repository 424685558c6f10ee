#pragma once
// What every oneDNN-backed CPU op shares: one CPU engine, a stream per calling thread, plain
// (row-major) memory descriptors over our tensors, per-thread reusable scratch buffers (the
// primitives' scratchpads and arguments held in a primitive's preferred blocked layout), memory
// objects each thread reuses by address and layout (wrap, scratch_memory), and a thread-safe cache
// of primitives keyed by shapes and parameters.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/tensor.h"

namespace pw::kernels::cpu {

dnnl::engine& dnnl_engine();
// Stage threads call ops concurrently; each gets its own stream.
dnnl::stream& dnnl_stream();

// oneDNN's element type for F32, BF16 and F16 (others: error naming `op`).
dnnl::memory::data_type dnnl_data_type(DType dtype, const char* op = "oneDNN");
// Descriptor with the plain row-major tag for the tensor's rank (x, nc, nchw).
dnnl::memory::desc plain_desc(const Shape& shape, DType dtype);
inline dnnl::memory::desc plain_f32_desc(const Shape& shape) { return plain_desc(shape, DType::F32); }
// Memory object over a tensor's storage (no copy); `desc` must describe its row-major layout.
dnnl::memory wrap(const Tensor& t, const dnnl::memory::desc& desc);
inline dnnl::memory wrap(const Tensor& t) { return wrap(t, plain_desc(t.shape(), t.dtype())); }

// Primitive attributes every cached primitive is built with: a scratchpad the caller owns, so a
// primitive can run on several threads at once.
dnnl::primitive_attr user_scratchpad_attr();

// Per-thread, grow-only, 64-byte aligned buffers. An op takes each slot at most once (the reorder
// slot once per reorder, which each finishes before the next) and is done with it when it returns
// (ops run synchronously on the calling thread), so stage threads never share one and
// steady-state training allocates nothing here.
enum class ScratchSlot : int { Scratchpad = 0, ReorderScratchpad, Arg0, Arg1, Arg2, Arg3, Count };
void* thread_scratch(ScratchSlot slot, std::size_t bytes);
// Memory object of layout `desc` over the calling thread's buffer `slot`.
dnnl::memory scratch_memory(const dnnl::memory::desc& desc, ScratchSlot slot);

// Enqueues `primitive` on this thread's stream with this thread's scratchpad sized by
// `scratchpad_desc`; does not wait (see execute / dnnl_stream().wait()).
void submit(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad_desc,
            std::unordered_map<int, dnnl::memory> args);
// submit, then wait for the stream.
void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad_desc,
             std::unordered_map<int, dnnl::memory> args);

// One primitive argument that the op keeps plain (row-major) at its API boundary but the primitive
// may want in another (blocked) layout: `inner` is the primitive's layout and `reorder` converts
// between the two (plain -> inner for inputs, inner -> plain for outputs); `same` when no
// conversion is needed and the tensor is passed directly.
struct Reformat {
  dnnl::memory::desc plain, inner;
  bool same = true;
  dnnl::primitive reorder;
  dnnl::memory::desc scratchpad;
};
// plain -> inner, for a primitive input.
Reformat input_reformat(const dnnl::memory::desc& plain, const dnnl::memory::desc& inner);
// inner -> plain, for a primitive output. With `accumulate`, the conversion adds into the plain
// destination (dst += result) instead of overwriting it, and is built even when the layouts match.
Reformat output_reformat(const dnnl::memory::desc& inner, const dnnl::memory::desc& plain, bool accumulate = false);

// The memory to pass the primitive for input `t`: `t` itself, or `t` reordered into the calling
// thread's buffer `slot` (the reorder is submitted to this thread's stream).
dnnl::memory prepare_input(const Reformat& f, const Tensor& t, ScratchSlot slot);
// The memory the primitive writes output `t` into: `t` itself, or the calling thread's buffer `slot`
// (then call finish_output after the primitive).
dnnl::memory prepare_output(const Reformat& f, const Tensor& t, ScratchSlot slot);
// Submits the inner -> plain conversion of an output from `inner_memory` into `t` (no-op when same).
void finish_output(const Reformat& f, const dnnl::memory& inner_memory, const Tensor& t);

using PrimitiveKey = std::vector<std::int64_t>;

// A small map from shapes/params to built primitives. Building is the slow part of oneDNN, so
// training steps with the same shapes reuse one entry. Entries are immutable once inserted.
template <typename Entry>
class PrimitiveCache {
 public:
  const Entry& get(const PrimitiveKey& key, const std::function<Entry()>& build) {
    {
      std::lock_guard lock(mutex_);
      auto it = entries_.find(key);
      if (it != entries_.end()) return *it->second;
    }
    auto entry = std::make_unique<Entry>(build());   // outside the lock: building can take a while
    std::lock_guard lock(mutex_);
    auto [it, inserted] = entries_.try_emplace(key, std::move(entry));
    return *it->second;
  }

 private:
  std::mutex mutex_;
  std::map<PrimitiveKey, std::unique_ptr<Entry>> entries_;
};

}  // namespace pw::kernels::cpu
