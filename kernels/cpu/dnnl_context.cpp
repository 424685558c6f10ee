#include "kernels/cpu/dnnl_context.h"

#include <array>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace pw::kernels::cpu {

using tag = dnnl::memory::format_tag;

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

dnnl::memory::data_type dnnl_data_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::F32: return dnnl::memory::data_type::f32;
    case DType::BF16: return dnnl::memory::data_type::bf16;
    case DType::F16: return dnnl::memory::data_type::f16;
    default: PW_FAIL("" << op << ": oneDNN takes F32, BF16 or F16 here, got " << dtype_name(dtype));
  }
}

dnnl::memory::desc plain_desc(const Shape& shape, DType dtype) {
  const dnnl::memory::dims dims(shape.begin(), shape.end());
  const auto type = dnnl_data_type(dtype);
  switch (shape.size()) {
    case 1: return {dims, type, tag::x};
    case 2: return {dims, type, tag::nc};
    case 4: return {dims, type, tag::nchw};
    default: PW_FAIL("no plain oneDNN layout for a " << shape.size() << "-D tensor " << shape_str(shape));
  }
}

namespace {

constexpr std::size_t kMostMemoryObjects = 4096;   // per thread; then it starts afresh

// A memory object over `data` in layout `desc`. Creating one allocates and initialises it (7% of a
// resnet18 step at micro-batch 1 went to that), yet it is only a layout over an address, and a
// step's tensors come back at the same addresses from the caching allocator: each thread keeps
// the objects it made by address and layout and hands the same one out again. An object is only
// ever reused for exactly its address and layout, so two arguments of one op never share one
// unless they are the same memory.
dnnl::memory memory_over(void* data, const dnnl::memory::desc& desc) {
  struct Made {
    dnnl::memory::desc desc;
    dnnl::memory memory;
  };
  thread_local std::unordered_map<void*, std::vector<Made>> made;
  thread_local std::size_t count = 0;
  if (const auto it = made.find(data); it != made.end())
    for (const auto& m : it->second)
      if (m.desc == desc) return m.memory;
  if (count >= kMostMemoryObjects) {
    made.clear();
    count = 0;
  }
  dnnl::memory memory(desc, dnnl_engine(), data);
  made[data].push_back({desc, memory});
  ++count;
  return memory;
}

}  // namespace

dnnl::memory wrap(const Tensor& t, const dnnl::memory::desc& desc) {
  PW_CHECK(t.device().is_cpu(), "oneDNN runs on CPU tensors, got " << t.describe());
  PW_CHECK(desc.get_size() <= t.nbytes(),
           "oneDNN layout needs " << desc.get_size() << " bytes but " << t.describe() << " holds " << t.nbytes());
  return memory_over(t.raw(), desc);
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {

struct ScratchBuffer {
  void* data = nullptr;
  std::size_t capacity = 0;
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { std::free(data); }
};

constexpr std::size_t kScratchAlign = 64;

}  // namespace

void* thread_scratch(ScratchSlot slot, std::size_t bytes) {
  thread_local std::array<ScratchBuffer, static_cast<std::size_t>(ScratchSlot::Count)> buffers;
  ScratchBuffer& b = buffers[static_cast<std::size_t>(slot)];
  if (bytes > b.capacity) {
    // Grow geometrically (rounded to the alignment) so a few shapes settle on one allocation.
    std::size_t capacity = std::max(bytes, b.capacity + b.capacity / 2);
    capacity = (capacity + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
    std::free(b.data);
    b.data = nullptr;
    b.capacity = 0;
    b.data = std::aligned_alloc(kScratchAlign, capacity);
    PW_CHECK(b.data != nullptr, "could not allocate a " << capacity << "-byte oneDNN scratch buffer");
    b.capacity = capacity;
  }
  return b.data;
}

dnnl::memory scratch_memory(const dnnl::memory::desc& desc, ScratchSlot slot) {
  return memory_over(thread_scratch(slot, std::max<std::size_t>(desc.get_size(), 1)), desc);
}

void submit(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad_desc,
            std::unordered_map<int, dnnl::memory> args) {
  if (scratchpad_desc.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, scratch_memory(scratchpad_desc, ScratchSlot::Scratchpad));
  primitive.execute(dnnl_stream(), args);
}

void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad_desc,
             std::unordered_map<int, dnnl::memory> args) {
  submit(primitive, scratchpad_desc, std::move(args));
  dnnl_stream().wait();
}

namespace {

Reformat make_reformat(const dnnl::memory::desc& from, const dnnl::memory::desc& to, const dnnl::memory::desc& plain,
                       const dnnl::memory::desc& inner, bool force, bool accumulate) {
  Reformat f;
  f.plain = plain;
  f.inner = inner;
  f.same = !force && plain == inner;
  if (f.same) return f;
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::reorder::primitive_desc pd(dnnl_engine(), from, dnnl_engine(), to, attr);
  f.reorder = dnnl::reorder(pd);
  f.scratchpad = pd.scratchpad_desc();
  return f;
}

void run_reorder(const Reformat& f, const dnnl::memory& from, const dnnl::memory& to) {
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  // Reorders rarely need a scratchpad; when one does, it takes the reorders' slot (not the
  // primitive's): an op's reorders run one after another, each done before the next starts.
  if (f.scratchpad.get_size() > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, scratch_memory(f.scratchpad, ScratchSlot::ReorderScratchpad));
  f.reorder.execute(dnnl_stream(), args);
}

}  // namespace

Reformat input_reformat(const dnnl::memory::desc& plain, const dnnl::memory::desc& inner) {
  return make_reformat(plain, inner, plain, inner, false, false);
}

Reformat output_reformat(const dnnl::memory::desc& inner, const dnnl::memory::desc& plain, bool accumulate) {
  return make_reformat(inner, plain, plain, inner, accumulate, accumulate);
}

dnnl::memory prepare_input(const Reformat& f, const Tensor& t, ScratchSlot slot) {
  if (f.same) return wrap(t, f.plain);
  dnnl::memory inner = scratch_memory(f.inner, slot);
  run_reorder(f, wrap(t, f.plain), inner);
  return inner;
}

dnnl::memory prepare_output(const Reformat& f, const Tensor& t, ScratchSlot slot) {
  if (f.same) return wrap(t, f.plain);
  return scratch_memory(f.inner, slot);
}

void finish_output(const Reformat& f, const dnnl::memory& inner_memory, const Tensor& t) {
  if (f.same) return;
  run_reorder(f, inner_memory, wrap(t, f.plain));
}

}  // namespace pw::kernels::cpu
