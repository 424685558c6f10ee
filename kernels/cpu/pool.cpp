// Pooling on the CPU: oneDNN max/avg pooling for F32 and BF16, reference loops for F64, and adaptive
// average pooling with OpenMP loops (parallel.h) for both.
#include <algorithm>
#include <limits>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/dnnl_context.h"
#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {

namespace {

using dnnl::memory;

// ---- oneDNN (F32) ----

struct PoolDescs {
  memory::desc src, dst;
  memory::dims strides, kernel, padding;
};

PoolDescs pool_descs(const Shape& x, const Pool2dParams& p, DType dtype) {
  // Symmetric padding: oneDNN's floor-division output size then equals PyTorch's (ceil_mode=False).
  return {plain_desc(x, dtype),
          plain_desc(pool2d_output_shape(x, p), dtype),
          {p.stride_h, p.stride_w},
          {p.kernel_h, p.kernel_w},
          {p.pad_h, p.pad_w}};
}

PrimitiveKey pool_key(const Shape& x, const Pool2dParams& p, DType dtype) {
  return {x[0], x[1], x[2], x[3], p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
          static_cast<std::int64_t>(dtype)};
}

dnnl::pooling_forward::primitive_desc forward_pd(const PoolDescs& d, dnnl::algorithm algo) {
  const dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_training, algo, d.src, d.dst, d.strides, d.kernel,
                                         d.padding, d.padding);
  return {desc, user_scratchpad_attr(), dnnl_engine()};
}

struct CachedPool {
  dnnl::primitive primitive;
  memory::desc scratchpad;
  memory::desc workspace;   // empty for average pooling
};

const CachedPool& forward_primitive(const Shape& x, const Pool2dParams& p, dnnl::algorithm algo, DType dtype) {
  static PrimitiveCache<CachedPool> max_cache, avg_cache;
  auto& cache = algo == dnnl::algorithm::pooling_max ? max_cache : avg_cache;
  return cache.get(pool_key(x, p, dtype), [&] {
    auto pd = forward_pd(pool_descs(x, p, dtype), algo);
    return CachedPool{dnnl::pooling_forward(pd), pd.scratchpad_desc(), pd.workspace_desc()};
  });
}

const CachedPool& backward_primitive(const Shape& x, const Pool2dParams& p, dnnl::algorithm algo, DType dtype) {
  static PrimitiveCache<CachedPool> max_cache, avg_cache;
  auto& cache = algo == dnnl::algorithm::pooling_max ? max_cache : avg_cache;
  return cache.get(pool_key(x, p, dtype), [&] {
    const PoolDescs d = pool_descs(x, p, dtype);
    const dnnl::pooling_backward::desc desc(algo, d.src, d.dst, d.strides, d.kernel, d.padding, d.padding);
    const dnnl::pooling_backward::primitive_desc pd(desc, user_scratchpad_attr(), dnnl_engine(), forward_pd(d, algo));
    return CachedPool{dnnl::pooling_backward(pd), pd.scratchpad_desc(), pd.workspace_desc()};
  });
}

MaxPoolResult max_forward_dnnl(const Tensor& x, const Pool2dParams& p) {
  const CachedPool& entry = forward_primitive(x.shape(), p, dnnl::algorithm::pooling_max, x.dtype());
  MaxPoolResult r{Tensor::empty(pool2d_output_shape(x.shape(), p), x.dtype(), x.device()),
                  Tensor::empty({static_cast<std::int64_t>(entry.workspace.get_size())}, DType::U8, x.device())};
  execute(entry.primitive, entry.scratchpad,
          {{DNNL_ARG_SRC, wrap(x)}, {DNNL_ARG_DST, wrap(r.y)}, {DNNL_ARG_WORKSPACE, wrap(r.workspace, entry.workspace)}});
  return r;
}

Tensor max_backward_dnnl(const Tensor& grad_y, const Tensor& workspace, const Shape& x_shape, const Pool2dParams& p) {
  const CachedPool& entry = backward_primitive(x_shape, p, dnnl::algorithm::pooling_max, grad_y.dtype());
  PW_CHECK(workspace.dtype() == DType::U8 && workspace.nbytes() == entry.workspace.get_size(),
           "max_pool2d_backward: workspace " << workspace.describe() << " is not the one max_pool2d_forward made for "
                                             << grad_y.describe() << " (expected U8[" << entry.workspace.get_size()
                                             << "])");
  Tensor grad_x = Tensor::empty(x_shape, grad_y.dtype(), grad_y.device());
  execute(entry.primitive, entry.scratchpad,
          {{DNNL_ARG_DIFF_DST, wrap(grad_y)},
           {DNNL_ARG_WORKSPACE, wrap(workspace, entry.workspace)},
           {DNNL_ARG_DIFF_SRC, wrap(grad_x)}});
  return grad_x;
}

Tensor avg_forward_dnnl(const Tensor& x, const Pool2dParams& p) {
  const CachedPool& entry = forward_primitive(x.shape(), p, dnnl::algorithm::pooling_avg_include_padding, x.dtype());
  Tensor y = Tensor::empty(pool2d_output_shape(x.shape(), p), x.dtype(), x.device());
  execute(entry.primitive, entry.scratchpad, {{DNNL_ARG_SRC, wrap(x)}, {DNNL_ARG_DST, wrap(y)}});
  return y;
}

Tensor avg_backward_dnnl(const Tensor& grad_y, const Shape& x_shape, const Pool2dParams& p) {
  const CachedPool& entry = backward_primitive(x_shape, p, dnnl::algorithm::pooling_avg_include_padding, grad_y.dtype());
  Tensor grad_x = Tensor::empty(x_shape, grad_y.dtype(), grad_y.device());
  execute(entry.primitive, entry.scratchpad, {{DNNL_ARG_DIFF_DST, wrap(grad_y)}, {DNNL_ARG_DIFF_SRC, wrap(grad_x)}});
  return grad_x;
}

// ---- reference loops (F64) ----

struct PoolGeometry {
  std::int64_t planes, h, w, oh, ow;
  Pool2dParams p;
};

PoolGeometry geometry(const Shape& x, const Pool2dParams& p) {
  const Shape y = pool2d_output_shape(x, p);
  return {x[0] * x[1], x[2], x[3], y[2], y[3], p};
}

// visit(output cell index in the plane, input cell index in the plane) for every window cell
// inside the unpadded input.
template <typename Visit>
void for_each_window_cell(const PoolGeometry& g, std::int64_t oy, std::int64_t ox, const Visit& visit) {
  for (std::int64_t ky = 0; ky < g.p.kernel_h; ++ky) {
    const std::int64_t iy = oy * g.p.stride_h - g.p.pad_h + ky;
    if (iy < 0 || iy >= g.h) continue;
    for (std::int64_t kx = 0; kx < g.p.kernel_w; ++kx) {
      const std::int64_t ix = ox * g.p.stride_w - g.p.pad_w + kx;
      if (ix < 0 || ix >= g.w) continue;
      visit(oy * g.ow + ox, iy * g.w + ix);
    }
  }
}

// The F64 workspace: I64 [N, C, OH, OW], the arg-max's index within its H*W plane.
template <typename T>
MaxPoolResult max_forward_reference(const Tensor& x, const Pool2dParams& p) {
  const PoolGeometry g = geometry(x.shape(), p);
  const Shape y_shape = pool2d_output_shape(x.shape(), p);
  MaxPoolResult r{Tensor::empty(y_shape, x.dtype(), x.device()), Tensor::empty(y_shape, DType::I64, x.device())};
  parallel_chunks(g.planes, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const T* in = x.data<T>() + plane * g.h * g.w;
      T* out = r.y.data<T>() + plane * g.oh * g.ow;
      std::int64_t* arg = r.workspace.data<std::int64_t>() + plane * g.oh * g.ow;
      for (std::int64_t oy = 0; oy < g.oh; ++oy) {
        for (std::int64_t ox = 0; ox < g.ow; ++ox) {
          T best = -std::numeric_limits<T>::infinity();
          std::int64_t best_at = -1;
          for_each_window_cell(g, oy, ox, [&](std::int64_t, std::int64_t i) {
            if (best_at < 0 || in[i] > best) {
              best = in[i];
              best_at = i;
            }
          });
          out[oy * g.ow + ox] = best;
          arg[oy * g.ow + ox] = best_at;
        }
      }
    }
  });
  return r;
}

template <typename T>
Tensor max_backward_reference(const Tensor& grad_y, const Tensor& workspace, const Shape& x_shape,
                              const Pool2dParams& p) {
  PW_CHECK(workspace.dtype() == DType::I64 && workspace.shape() == grad_y.shape(),
           "max_pool2d_backward: workspace " << workspace.describe() << " is not the one max_pool2d_forward made for "
                                             << grad_y.describe());
  const PoolGeometry g = geometry(x_shape, p);
  Tensor grad_x = Tensor::zeros(x_shape, grad_y.dtype(), grad_y.device());
  parallel_chunks(g.planes, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const T* gy = grad_y.data<T>() + plane * g.oh * g.ow;
      const std::int64_t* arg = workspace.data<std::int64_t>() + plane * g.oh * g.ow;
      T* gx = grad_x.data<T>() + plane * g.h * g.w;
      for (std::int64_t o = 0; o < g.oh * g.ow; ++o) {
        if (arg[o] >= 0) gx[arg[o]] += gy[o];
      }
    }
  });
  return grad_x;
}

template <typename T>
Tensor avg_forward_reference(const Tensor& x, const Pool2dParams& p) {
  const PoolGeometry g = geometry(x.shape(), p);
  Tensor y = Tensor::zeros(pool2d_output_shape(x.shape(), p), x.dtype(), x.device());
  const T divisor = static_cast<T>(p.kernel_h * p.kernel_w);   // padded cells count (count_include_pad)
  parallel_chunks(g.planes, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const T* in = x.data<T>() + plane * g.h * g.w;
      T* out = y.data<T>() + plane * g.oh * g.ow;
      for (std::int64_t oy = 0; oy < g.oh; ++oy) {
        for (std::int64_t ox = 0; ox < g.ow; ++ox) {
          for_each_window_cell(g, oy, ox, [&](std::int64_t o, std::int64_t i) { out[o] += in[i]; });
          out[oy * g.ow + ox] /= divisor;
        }
      }
    }
  });
  return y;
}

template <typename T>
Tensor avg_backward_reference(const Tensor& grad_y, const Shape& x_shape, const Pool2dParams& p) {
  const PoolGeometry g = geometry(x_shape, p);
  Tensor grad_x = Tensor::zeros(x_shape, grad_y.dtype(), grad_y.device());
  const T divisor = static_cast<T>(p.kernel_h * p.kernel_w);
  parallel_chunks(g.planes, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const T* gy = grad_y.data<T>() + plane * g.oh * g.ow;
      T* gx = grad_x.data<T>() + plane * g.h * g.w;
      for (std::int64_t oy = 0; oy < g.oh; ++oy) {
        for (std::int64_t ox = 0; ox < g.ow; ++ox) {
          for_each_window_cell(g, oy, ox, [&](std::int64_t o, std::int64_t i) { gx[i] += gy[o] / divisor; });
        }
      }
    }
  });
  return grad_x;
}

// ---- adaptive average pooling (OpenMP loops, any float type) ----

// PyTorch's bins: output i covers [floor(i*size/out), ceil((i+1)*size/out)).
std::int64_t bin_start(std::int64_t i, std::int64_t size, std::int64_t out) { return (i * size) / out; }
std::int64_t bin_end(std::int64_t i, std::int64_t size, std::int64_t out) { return ((i + 1) * size + out - 1) / out; }

template <typename T>
Tensor adaptive_forward(const Tensor& x, std::int64_t oh, std::int64_t ow) {
  using C = compute_t<T>;
  const std::int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
  Tensor y = Tensor::empty({x.dim(0), x.dim(1), oh, ow}, x.dtype(), x.device());
  parallel_chunks(planes, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const T* in = x.data<T>() + plane * h * w;
      T* out = y.data<T>() + plane * oh * ow;
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        const std::int64_t y0 = bin_start(oy, h, oh), y1 = bin_end(oy, h, oh);
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          const std::int64_t x0 = bin_start(ox, w, ow), x1 = bin_end(ox, w, ow);
          C total = 0;
          for (std::int64_t iy = y0; iy < y1; ++iy)
            for (std::int64_t ix = x0; ix < x1; ++ix) total += load(in[iy * w + ix]);
          out[oy * ow + ox] = store<T>(total / static_cast<C>((y1 - y0) * (x1 - x0)));
        }
      }
    }
  });
  return y;
}

template <typename T>
Tensor adaptive_backward(const Tensor& grad_y, const Shape& x_shape) {
  using C = compute_t<T>;
  const std::int64_t planes = x_shape[0] * x_shape[1], h = x_shape[2], w = x_shape[3];
  const std::int64_t oh = grad_y.dim(2), ow = grad_y.dim(3);
  // Summed in the compute type (windows may overlap), stored once per plane.
  Tensor grad_x = Tensor::empty(x_shape, grad_y.dtype(), grad_y.device());
  parallel_chunks(planes, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<C> acc(static_cast<std::size_t>(h * w));
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const T* gy = grad_y.data<T>() + plane * oh * ow;
      T* out = grad_x.data<T>() + plane * h * w;
      std::fill(acc.begin(), acc.end(), C(0));
      C* gx = acc.data();
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        const std::int64_t y0 = bin_start(oy, h, oh), y1 = bin_end(oy, h, oh);
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          const std::int64_t x0 = bin_start(ox, w, ow), x1 = bin_end(ox, w, ow);
          const C share = load(gy[oy * ow + ox]) / static_cast<C>((y1 - y0) * (x1 - x0));
          for (std::int64_t iy = y0; iy < y1; ++iy)
            for (std::int64_t ix = x0; ix < x1; ++ix) gx[iy * w + ix] += share;
        }
      }
      for (std::int64_t i = 0; i < h * w; ++i) out[i] = store<T>(gx[i]);
    }
  });
  return grad_x;
}

}  // namespace

MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dParams& p) {
  if (x.dtype() == DType::BF16) return max_forward_dnnl(x, p);
  return visit_float(x.dtype(), "max_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) return max_forward_dnnl(x, p);
    else return max_forward_reference<T>(x, p);
  });
}

Tensor max_pool2d_backward(const Tensor& grad_y, const Tensor& workspace, const Shape& x_shape, const Pool2dParams& p) {
  if (grad_y.dtype() == DType::BF16) return max_backward_dnnl(grad_y, workspace, x_shape, p);
  return visit_float(grad_y.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) return max_backward_dnnl(grad_y, workspace, x_shape, p);
    else return max_backward_reference<T>(grad_y, workspace, x_shape, p);
  });
}

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p) {
  if (x.dtype() == DType::BF16) return avg_forward_dnnl(x, p);
  return visit_float(x.dtype(), "avg_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) return avg_forward_dnnl(x, p);
    else return avg_forward_reference<T>(x, p);
  });
}

Tensor avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape, const Pool2dParams& p) {
  if (grad_y.dtype() == DType::BF16) return avg_backward_dnnl(grad_y, x_shape, p);
  return visit_float(grad_y.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) return avg_backward_dnnl(grad_y, x_shape, p);
    else return avg_backward_reference<T>(grad_y, x_shape, p);
  });
}

Tensor adaptive_avg_pool2d_forward(const Tensor& x, int out_h, int out_w) {
  return visit_any_float(x.dtype(), "adaptive_avg_pool2d_forward", [&](auto tag) {
    return adaptive_forward<decltype(tag)>(x, out_h, out_w);
  });
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape) {
  return visit_any_float(grad_y.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    return adaptive_backward<decltype(tag)>(grad_y, x_shape);
  });
}

}  // namespace pw::kernels::cpu
