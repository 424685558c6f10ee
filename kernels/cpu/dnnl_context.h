#pragma once
// What every oneDNN-backed CPU op shares: one CPU engine, a stream per calling thread, plain
// (row-major) memory descriptors over our tensors, execution with a per-call scratchpad, and a
// thread-safe cache of primitives keyed by shapes and parameters.
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

// f32 descriptor with the plain row-major tag for the tensor's rank (x, nc, nchw).
dnnl::memory::desc plain_f32_desc(const Shape& shape);
// Memory object over a tensor's storage (no copy); `desc` must describe its row-major layout.
dnnl::memory wrap(const Tensor& t, const dnnl::memory::desc& desc);
inline dnnl::memory wrap(const Tensor& t) { return wrap(t, plain_f32_desc(t.shape())); }

// Primitive attributes every cached primitive is built with: a scratchpad the caller owns, so a
// primitive can run on several threads at once.
dnnl::primitive_attr user_scratchpad_attr();

// Runs `primitive` on this thread's stream with a fresh scratchpad sized by `scratchpad_desc`.
void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad_desc,
             std::unordered_map<int, dnnl::memory> args);

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
