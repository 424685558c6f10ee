#include "kernels/cpu/dnnl_context.h"

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

dnnl::memory::desc plain_f32_desc(const Shape& shape) {
  const dnnl::memory::dims dims(shape.begin(), shape.end());
  switch (shape.size()) {
    case 1: return {dims, dnnl::memory::data_type::f32, tag::x};
    case 2: return {dims, dnnl::memory::data_type::f32, tag::nc};
    case 4: return {dims, dnnl::memory::data_type::f32, tag::nchw};
    default: PW_FAIL("no plain oneDNN layout for a " << shape.size() << "-D tensor " << shape_str(shape));
  }
}

dnnl::memory wrap(const Tensor& t, const dnnl::memory::desc& desc) {
  PW_CHECK(t.device().is_cpu(), "oneDNN runs on CPU tensors, got " << t.describe());
  PW_CHECK(desc.get_size() <= t.nbytes(),
           "oneDNN layout needs " << desc.get_size() << " bytes but " << t.describe() << " holds " << t.nbytes());
  return dnnl::memory(desc, dnnl_engine(), t.raw());
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad_desc,
             std::unordered_map<int, dnnl::memory> args) {
  if (scratchpad_desc.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad_desc, dnnl_engine()));
  auto& stream = dnnl_stream();
  primitive.execute(stream, args);
  stream.wait();
}

}  // namespace pw::kernels::cpu
