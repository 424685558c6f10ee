// conv2d on the CPU: oneDNN for F32 and BF16, reference loops for F64 (finite-difference checks).
// F16 never reaches here: the op layer runs it through F32 (kernels/ops/half_support.h).
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/dnnl_context.h"
#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {

namespace {

using dnnl::memory;

// ---- oneDNN (F32, and BF16 with F32 bias and weight gradients) ----
//
// Primitives are built with format_tag::any so oneDNN picks its blocked jit kernels (e.g.
// nChw16c activations, OIhw16i16o weights); our tensors stay plain NCHW/OIHW at the op boundary,
// so each call reorders the inputs into the calling thread's scratch buffers and the outputs back.
// The reorders are built once with the primitive and cached alongside it. In BF16, activations,
// weights and their gradients are BF16 while the bias and the weight gradients (which accumulate
// over micro-batches) stay F32; oneDNN accumulates every product in F32.

struct ConvDescs {
  memory::desc src, weights, bias, dst;   // plain
  memory::desc grad_weights, grad_bias;   // plain, F32 when the data is BF16
  memory::dims strides, padding;
};

ConvDescs conv_descs(const Shape& x, const Shape& w, const Conv2dParams& p, DType data) {
  // Symmetric padding: oneDNN's output size rule (floor division) then matches PyTorch's.
  return {plain_desc(x, data),
          plain_desc(w, data),
          plain_f32_desc({w[0]}),
          plain_desc(conv2d_output_shape(x, w, p), data),
          plain_f32_desc(w),
          plain_f32_desc({w[0]}),
          {p.stride_h, p.stride_w},
          {p.pad_h, p.pad_w}};
}

// The same shapes and element type with the layout left to oneDNN.
memory::desc any_desc(const memory::desc& plain) {
  return {plain.dims(), plain.data_type(), memory::format_tag::any};
}

enum class Bias { Without, With };

PrimitiveKey conv_key(const Shape& x, const Shape& w, const Conv2dParams& p, Bias bias, DType data) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], p.stride_h, p.stride_w, p.pad_h, p.pad_w,
          static_cast<std::int64_t>(bias), static_cast<std::int64_t>(data)};
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvDescs& d, Bias bias) {
  using fwd = dnnl::convolution_forward;
  const auto kind = dnnl::prop_kind::forward_training;
  const auto algo = dnnl::algorithm::convolution_direct;
  const memory::desc src = any_desc(d.src), weights = any_desc(d.weights), dst = any_desc(d.dst);
  const fwd::desc desc = bias == Bias::With
                             ? fwd::desc(kind, algo, src, weights, d.bias, dst, d.strides, d.padding, d.padding)
                             : fwd::desc(kind, algo, src, weights, dst, d.strides, d.padding, d.padding);
  return {desc, user_scratchpad_attr(), dnnl_engine()};
}

// A conv primitive and the conversions of its two inputs (a, b) and one output (c) between
// our plain layouts and the primitive's.
struct CachedConv {
  dnnl::primitive primitive;
  memory::desc scratchpad;
  Reformat a, b, c;
};

Tensor forward_dnnl(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  static PrimitiveCache<CachedConv> cache;
  const Bias with = bias.defined() ? Bias::With : Bias::Without;
  const DType data = x.dtype();
  const auto& entry = cache.get(conv_key(x.shape(), w.shape(), p, with, data), [&] {
    const ConvDescs d = conv_descs(x.shape(), w.shape(), p, data);
    auto pd = forward_pd(d, with);
    return CachedConv{dnnl::convolution_forward(pd), pd.scratchpad_desc(), input_reformat(d.src, pd.src_desc()),
                      input_reformat(d.weights, pd.weights_desc()), output_reformat(pd.dst_desc(), d.dst)};
  });
  Tensor y = Tensor::empty(conv2d_output_shape(x.shape(), w.shape(), p), data, x.device());
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, prepare_input(entry.a, x, ScratchSlot::Arg0)},
                                          {DNNL_ARG_WEIGHTS, prepare_input(entry.b, w, ScratchSlot::Arg1)}};
  const memory dst = prepare_output(entry.c, y, ScratchSlot::Arg2);
  args.emplace(DNNL_ARG_DST, dst);
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, wrap(bias));
  submit(entry.primitive, entry.scratchpad, std::move(args));
  finish_output(entry.c, dst, y);
  dnnl_stream().wait();
  return y;
}

Tensor backward_data_dnnl(const Tensor& grad_y, const Tensor& w, const Shape& x_shape, const Conv2dParams& p) {
  static PrimitiveCache<CachedConv> cache;
  const DType data = grad_y.dtype();
  const auto& entry = cache.get(conv_key(x_shape, w.shape(), p, Bias::Without, data), [&] {
    using bwd = dnnl::convolution_backward_data;
    const ConvDescs d = conv_descs(x_shape, w.shape(), p, data);
    const bwd::desc desc(dnnl::algorithm::convolution_direct, any_desc(d.src), any_desc(d.weights), any_desc(d.dst),
                         d.strides, d.padding, d.padding);
    const bwd::primitive_desc pd(desc, user_scratchpad_attr(), dnnl_engine(), forward_pd(d, Bias::Without));
    return CachedConv{bwd(pd), pd.scratchpad_desc(), input_reformat(d.dst, pd.diff_dst_desc()),
                      input_reformat(d.weights, pd.weights_desc()), output_reformat(pd.diff_src_desc(), d.src)};
  });
  Tensor grad_x = Tensor::empty(x_shape, data, grad_y.device());
  std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, prepare_input(entry.a, grad_y, ScratchSlot::Arg0)},
                                          {DNNL_ARG_WEIGHTS, prepare_input(entry.b, w, ScratchSlot::Arg1)}};
  const memory diff_src = prepare_output(entry.c, grad_x, ScratchSlot::Arg2);
  args.emplace(DNNL_ARG_DIFF_SRC, diff_src);
  submit(entry.primitive, entry.scratchpad, std::move(args));
  finish_output(entry.c, diff_src, grad_x);
  dnnl_stream().wait();
  return grad_x;
}

struct CachedConvFilter {
  CachedConv conv;   // a = src, b = diff_dst, c = diff_weights (accumulating into grad_w)
  Reformat bias;     // diff_bias, accumulating into grad_bias
};

void backward_filter_dnnl(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias,
                          const Conv2dParams& p) {
  static PrimitiveCache<CachedConvFilter> cache;
  const Bias with = grad_bias.defined() ? Bias::With : Bias::Without;
  const DType data = x.dtype();
  const auto& entry = cache.get(conv_key(x.shape(), grad_w.shape(), p, with, data), [&] {
    using bwd = dnnl::convolution_backward_weights;
    const auto algo = dnnl::algorithm::convolution_direct;
    const ConvDescs d = conv_descs(x.shape(), grad_w.shape(), p, data);
    const memory::desc src = any_desc(d.src), weights = any_desc(d.grad_weights), dst = any_desc(d.dst);
    const bwd::desc desc = with == Bias::With
                               ? bwd::desc(algo, src, weights, d.grad_bias, dst, d.strides, d.padding, d.padding)
                               : bwd::desc(algo, src, weights, dst, d.strides, d.padding, d.padding);
    const bwd::primitive_desc pd(desc, user_scratchpad_attr(), dnnl_engine(), forward_pd(d, with));
    // oneDNN overwrites its outputs; the contract accumulates, so the conversion back to the
    // plain layout adds into grad_w / grad_bias (a reorder with a sum post-op).
    CachedConvFilter e{{bwd(pd), pd.scratchpad_desc(), input_reformat(d.src, pd.src_desc()),
                        input_reformat(d.dst, pd.diff_dst_desc()),
                        output_reformat(pd.diff_weights_desc(), d.grad_weights, /*accumulate=*/true)},
                       {}};
    if (with == Bias::With) e.bias = output_reformat(pd.diff_bias_desc(), d.grad_bias, /*accumulate=*/true);
    return e;
  });
  const CachedConv& conv = entry.conv;
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, prepare_input(conv.a, x, ScratchSlot::Arg0)},
                                          {DNNL_ARG_DIFF_DST, prepare_input(conv.b, grad_y, ScratchSlot::Arg1)}};
  const memory diff_w = prepare_output(conv.c, grad_w, ScratchSlot::Arg2);
  args.emplace(DNNL_ARG_DIFF_WEIGHTS, diff_w);
  memory diff_b;
  if (with == Bias::With) {
    diff_b = prepare_output(entry.bias, grad_bias, ScratchSlot::Arg3);
    args.emplace(DNNL_ARG_DIFF_BIAS, diff_b);
  }
  submit(conv.primitive, conv.scratchpad, std::move(args));
  finish_output(conv.c, diff_w, grad_w);
  if (with == Bias::With) finish_output(entry.bias, diff_b, grad_bias);
  dnnl_stream().wait();
}

// ---- reference loops (F64) ----

struct ConvGeometry {
  std::int64_t n, cin, h, w, cout, kh, kw, oh, ow;
  int sh, sw, ph, pw;
};

ConvGeometry geometry(const Shape& x, const Shape& w, const Conv2dParams& p) {
  const Shape y = conv2d_output_shape(x, w, p);
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], p.stride_h, p.stride_w, p.pad_h, p.pad_w};
}

// Calls visit(x_offset, w_offset, y_offset) for every (input cell, weight, output cell) product
// of sample n and output channel co that falls inside the unpadded input.
template <typename Visit>
void for_each_tap(const ConvGeometry& g, std::int64_t n, std::int64_t co, const Visit& visit) {
  for (std::int64_t oy = 0; oy < g.oh; ++oy) {
    for (std::int64_t ox = 0; ox < g.ow; ++ox) {
      const std::int64_t y_off = ((n * g.cout + co) * g.oh + oy) * g.ow + ox;
      for (std::int64_t ci = 0; ci < g.cin; ++ci) {
        for (std::int64_t ky = 0; ky < g.kh; ++ky) {
          const std::int64_t iy = oy * g.sh - g.ph + ky;
          if (iy < 0 || iy >= g.h) continue;
          for (std::int64_t kx = 0; kx < g.kw; ++kx) {
            const std::int64_t ix = ox * g.sw - g.pw + kx;
            if (ix < 0 || ix >= g.w) continue;
            visit(((n * g.cin + ci) * g.h + iy) * g.w + ix, ((co * g.cin + ci) * g.kh + ky) * g.kw + kx, y_off);
          }
        }
      }
    }
  }
}

template <typename T>
Tensor forward_reference(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  const ConvGeometry g = geometry(x.shape(), w.shape(), p);
  Tensor y = Tensor::zeros({g.n, g.cout, g.oh, g.ow}, x.dtype(), x.device());
  const T* xs = x.data<T>();
  const T* ws = w.data<T>();
  T* ys = y.data<T>();
  parallel_chunks(g.n * g.cout, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t nc = begin; nc < end; ++nc) {
      const std::int64_t n = nc / g.cout, co = nc % g.cout;
      for_each_tap(g, n, co, [&](std::int64_t xo, std::int64_t wo, std::int64_t yo) { ys[yo] += xs[xo] * ws[wo]; });
      if (bias.defined()) {
        T* plane = ys + nc * g.oh * g.ow;
        for (std::int64_t i = 0; i < g.oh * g.ow; ++i) plane[i] += bias.data<T>()[co];
      }
    }
  });
  return y;
}

template <typename T>
Tensor backward_data_reference(const Tensor& grad_y, const Tensor& w, const Shape& x_shape, const Conv2dParams& p) {
  const ConvGeometry g = geometry(x_shape, w.shape(), p);
  Tensor grad_x = Tensor::zeros(x_shape, grad_y.dtype(), grad_y.device());
  const T* gy = grad_y.data<T>();
  const T* ws = w.data<T>();
  T* gx = grad_x.data<T>();
  parallel_chunks(g.n, 1, [&](std::int64_t begin, std::int64_t end) {   // samples write disjoint grad_x
    for (std::int64_t n = begin; n < end; ++n) {
      for (std::int64_t co = 0; co < g.cout; ++co) {
        for_each_tap(g, n, co, [&](std::int64_t xo, std::int64_t wo, std::int64_t yo) { gx[xo] += gy[yo] * ws[wo]; });
      }
    }
  });
  return grad_x;
}

template <typename T>
void backward_filter_reference(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias,
                               const Conv2dParams& p) {
  const ConvGeometry g = geometry(x.shape(), grad_w.shape(), p);
  const T* xs = x.data<T>();
  const T* gy = grad_y.data<T>();
  T* gw = grad_w.data<T>();
  parallel_chunks(g.cout, 1, [&](std::int64_t begin, std::int64_t end) {   // output channels own their weights
    for (std::int64_t co = begin; co < end; ++co) {
      for (std::int64_t n = 0; n < g.n; ++n) {
        for_each_tap(g, n, co, [&](std::int64_t xo, std::int64_t wo, std::int64_t yo) { gw[wo] += gy[yo] * xs[xo]; });
      }
      if (grad_bias.defined()) {
        T total = 0;
        for (std::int64_t n = 0; n < g.n; ++n) {
          const T* plane = gy + (n * g.cout + co) * g.oh * g.ow;
          for (std::int64_t i = 0; i < g.oh * g.ow; ++i) total += plane[i];
        }
        grad_bias.data<T>()[co] += total;
      }
    }
  });
}

}  // namespace

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  if (x.dtype() == DType::BF16) return forward_dnnl(x, w, bias, p);
  return visit_float(x.dtype(), "conv2d_forward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) return forward_dnnl(x, w, bias, p);
    else return forward_reference<T>(x, w, bias, p);
  });
}

Tensor conv2d_backward_data(const Tensor& grad_y, const Tensor& w, const Shape& x_shape, const Conv2dParams& p) {
  if (grad_y.dtype() == DType::BF16) return backward_data_dnnl(grad_y, w, x_shape, p);
  return visit_float(grad_y.dtype(), "conv2d_backward_data", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) return backward_data_dnnl(grad_y, w, x_shape, p);
    else return backward_data_reference<T>(grad_y, w, x_shape, p);
  });
}

void conv2d_backward_filter(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias,
                            const Conv2dParams& p) {
  if (x.dtype() == DType::BF16) return backward_filter_dnnl(x, grad_y, grad_w, grad_bias, p);
  visit_float(x.dtype(), "conv2d_backward_filter", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) backward_filter_dnnl(x, grad_y, grad_w, grad_bias, p);
    else backward_filter_reference<T>(x, grad_y, grad_w, grad_bias, p);
  });
}

}  // namespace pw::kernels::cpu
