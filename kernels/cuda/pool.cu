// Max, average (count_include_pad = True) and adaptive-average pooling on CUDA, own kernels, for
// F32, BF16 and F16 (computed in float, one rounding per result).
// Backward passes gather (each input cell sums the output cells whose window covers it), so they
// are deterministic and need no atomics.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/ops.h"

#include <cmath>
#include <limits>

namespace pw::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::kThreads;
using detail::load;
using detail::store;

// Geometry of one pooling call: planes = N * C, input H x W, output OH x OW.
struct PoolGeom {
  std::int64_t planes;
  int h, w, oh, ow;
  int kh, kw, sh, sw, ph, pw;
};

// ---- kernels ------------------------------------------------------------------------------------

// Workspace: per output cell, the flat index (h * W + w) of the arg-max inside its input plane
// (first maximum in row-major window order; a NaN wins and stops the search, as PyTorch).
template <typename T>
__global__ void max_pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y,
                                        std::int32_t* __restrict__ argmax, PoolGeom g) {
  const std::int64_t total = g.planes * g.oh * g.ow;
  PW_CUDA_KERNEL_LOOP(i, total) {
    const int ox = static_cast<int>(i % g.ow);
    const int oy = static_cast<int>((i / g.ow) % g.oh);
    const std::int64_t plane = i / (static_cast<std::int64_t>(g.ow) * g.oh);
    const T* xp = x + plane * g.h * g.w;
    const int h0 = oy * g.sh - g.ph, w0 = ox * g.sw - g.pw;
    const int h1 = min(h0 + g.kh, g.h), w1 = min(w0 + g.kw, g.w);
    float best = -INFINITY;
    int best_at = -1;
    for (int yy = max(h0, 0); yy < h1; ++yy) {
      for (int xx = max(w0, 0); xx < w1; ++xx) {
        const float v = load(xp[yy * g.w + xx]);
        if (v > best || isnan(v) || best_at < 0) {
          best = v;
          best_at = yy * g.w + xx;
          if (isnan(v)) {
            yy = h1;   // stop both loops
            break;
          }
        }
      }
    }
    y[i] = store<T>(best);
    argmax[i] = best_at;
  }
}

// First output row/column whose window covers input coordinate `c` (with padding `pad`,
// kernel `k`, stride `s`), and one past the last, clipped to [0, out).
__device__ __forceinline__ void covering_range(int c, int pad, int k, int s, int out, int* first, int* last) {
  const int shifted = c + pad;
  *first = shifted < k ? 0 : (shifted - k) / s + 1;
  *last = min(shifted / s + 1, out);
}

template <typename T>
__global__ void max_pool_backward_kernel(const T* __restrict__ grad_y, const std::int32_t* __restrict__ argmax,
                                         T* __restrict__ grad_x, PoolGeom g) {
  const std::int64_t total = g.planes * g.h * g.w;
  PW_CUDA_KERNEL_LOOP(i, total) {
    const int xx = static_cast<int>(i % g.w);
    const int yy = static_cast<int>((i / g.w) % g.h);
    const std::int64_t plane = i / (static_cast<std::int64_t>(g.w) * g.h);
    const std::int64_t out_base = plane * g.oh * g.ow;
    const int self = yy * g.w + xx;
    int oy0, oy1, ox0, ox1;
    covering_range(yy, g.ph, g.kh, g.sh, g.oh, &oy0, &oy1);
    covering_range(xx, g.pw, g.kw, g.sw, g.ow, &ox0, &ox1);
    float acc = 0.0f;
    for (int oy = oy0; oy < oy1; ++oy) {
      for (int ox = ox0; ox < ox1; ++ox) {
        const std::int64_t o = out_base + oy * g.ow + ox;
        if (argmax[o] == self) acc += load(grad_y[o]);
      }
    }
    grad_x[i] = store<T>(acc);
  }
}

// PyTorch's count_include_pad divisor: the window clipped to the padded input (not to the input).
__device__ __forceinline__ int avg_divisor(int oy, int ox, const PoolGeom& g) {
  const int h0 = oy * g.sh - g.ph, w0 = ox * g.sw - g.pw;
  const int h1 = min(h0 + g.kh, g.h + g.ph), w1 = min(w0 + g.kw, g.w + g.pw);
  return (h1 - h0) * (w1 - w0);
}

template <typename T>
__global__ void avg_pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, PoolGeom g) {
  const std::int64_t total = g.planes * g.oh * g.ow;
  PW_CUDA_KERNEL_LOOP(i, total) {
    const int ox = static_cast<int>(i % g.ow);
    const int oy = static_cast<int>((i / g.ow) % g.oh);
    const std::int64_t plane = i / (static_cast<std::int64_t>(g.ow) * g.oh);
    const T* xp = x + plane * g.h * g.w;
    const int h0 = oy * g.sh - g.ph, w0 = ox * g.sw - g.pw;
    const int h1 = min(h0 + g.kh, g.h), w1 = min(w0 + g.kw, g.w);
    float acc = 0.0f;
    for (int yy = max(h0, 0); yy < h1; ++yy)
      for (int xx = max(w0, 0); xx < w1; ++xx) acc += load(xp[yy * g.w + xx]);
    y[i] = store<T>(acc / static_cast<float>(avg_divisor(oy, ox, g)));
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(const T* __restrict__ grad_y, T* __restrict__ grad_x, PoolGeom g) {
  const std::int64_t total = g.planes * g.h * g.w;
  PW_CUDA_KERNEL_LOOP(i, total) {
    const int xx = static_cast<int>(i % g.w);
    const int yy = static_cast<int>((i / g.w) % g.h);
    const std::int64_t plane = i / (static_cast<std::int64_t>(g.w) * g.h);
    const T* gy = grad_y + plane * g.oh * g.ow;
    int oy0, oy1, ox0, ox1;
    covering_range(yy, g.ph, g.kh, g.sh, g.oh, &oy0, &oy1);
    covering_range(xx, g.pw, g.kw, g.sw, g.ow, &ox0, &ox1);
    float acc = 0.0f;
    for (int oy = oy0; oy < oy1; ++oy)
      for (int ox = ox0; ox < ox1; ++ox) acc += load(gy[oy * g.ow + ox]) / static_cast<float>(avg_divisor(oy, ox, g));
    grad_x[i] = store<T>(acc);
  }
}

// Adaptive window of output cell `o` over an input extent `in` split into `out` cells:
// [floor(o * in / out), ceil((o + 1) * in / out)).
__device__ __forceinline__ int adaptive_start(int o, int in, int out) {
  return static_cast<int>((static_cast<std::int64_t>(o) * in) / out);
}
__device__ __forceinline__ int adaptive_end(int o, int in, int out) {
  return static_cast<int>(((static_cast<std::int64_t>(o) + 1) * in + out - 1) / out);
}

template <typename T>
__global__ void adaptive_avg_pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, PoolGeom g) {
  const std::int64_t total = g.planes * g.oh * g.ow;
  PW_CUDA_KERNEL_LOOP(i, total) {
    const int ox = static_cast<int>(i % g.ow);
    const int oy = static_cast<int>((i / g.ow) % g.oh);
    const std::int64_t plane = i / (static_cast<std::int64_t>(g.ow) * g.oh);
    const T* xp = x + plane * g.h * g.w;
    const int h0 = adaptive_start(oy, g.h, g.oh), h1 = adaptive_end(oy, g.h, g.oh);
    const int w0 = adaptive_start(ox, g.w, g.ow), w1 = adaptive_end(ox, g.w, g.ow);
    float acc = 0.0f;
    for (int yy = h0; yy < h1; ++yy)
      for (int xx = w0; xx < w1; ++xx) acc += load(xp[yy * g.w + xx]);
    y[i] = store<T>(acc / static_cast<float>((h1 - h0) * (w1 - w0)));
  }
}

template <typename T>
__global__ void adaptive_avg_pool_backward_kernel(const T* __restrict__ grad_y, T* __restrict__ grad_x,
                                                  PoolGeom g) {
  const std::int64_t total = g.planes * g.h * g.w;
  PW_CUDA_KERNEL_LOOP(i, total) {
    const int xx = static_cast<int>(i % g.w);
    const int yy = static_cast<int>((i / g.w) % g.h);
    const std::int64_t plane = i / (static_cast<std::int64_t>(g.w) * g.h);
    const T* gy = grad_y + plane * g.oh * g.ow;
    // Output cells whose window holds yy: [floor(yy * OH / H), ceil((yy + 1) * OH / H)); the
    // membership test below keeps this exact whatever the rounding.
    const int oy0 = adaptive_start(yy, g.oh, g.h), oy1 = adaptive_end(yy, g.oh, g.h);
    const int ox0 = adaptive_start(xx, g.ow, g.w), ox1 = adaptive_end(xx, g.ow, g.w);
    float acc = 0.0f;
    for (int oy = max(oy0 - 1, 0); oy < min(oy1 + 1, g.oh); ++oy) {
      const int h0 = adaptive_start(oy, g.h, g.oh), h1 = adaptive_end(oy, g.h, g.oh);
      if (yy < h0 || yy >= h1) continue;
      for (int ox = max(ox0 - 1, 0); ox < min(ox1 + 1, g.ow); ++ox) {
        const int w0 = adaptive_start(ox, g.w, g.ow), w1 = adaptive_end(ox, g.w, g.ow);
        if (xx < w0 || xx >= w1) continue;
        acc += load(gy[oy * g.ow + ox]) / static_cast<float>((h1 - h0) * (w1 - w0));
      }
    }
    grad_x[i] = store<T>(acc);
  }
}

// ---- helpers ------------------------------------------------------------------------------------

int dim_int(std::int64_t v, const char* what) {
  PW_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "pool2d: " << what << " = " << v << " is too large");
  return static_cast<int>(v);
}

PoolGeom make_geom(const Shape& x, std::int64_t oh, std::int64_t ow, const Pool2dParams* p) {
  PW_CHECK(x.size() == 4, "pool2d: input must be [N, C, H, W], got " << shape_str(x));
  PoolGeom g{};
  g.planes = x[0] * x[1];
  g.h = dim_int(x[2], "H");
  g.w = dim_int(x[3], "W");
  g.oh = dim_int(oh, "OH");
  g.ow = dim_int(ow, "OW");
  // Flat plane offsets (h * W + w) are int32 in the max-pool workspace.
  PW_CHECK(x[2] * x[3] <= std::numeric_limits<std::int32_t>::max(), "pool2d: plane " << shape_str(x) << " too large");
  if (p != nullptr) {
    g.kh = p->kernel_h;
    g.kw = p->kernel_w;
    g.sh = p->stride_h;
    g.sw = p->stride_w;
    g.ph = p->pad_h;
    g.pw = p->pad_w;
  }
  return g;
}

// Output shape of a (non-adaptive) pooling window, as pool2d_output_shape.
Shape pooled_shape(const Shape& x, const Pool2dParams& p) {
  PW_CHECK(x.size() == 4, "pool2d: input must be [N, C, H, W], got " << shape_str(x));
  PW_CHECK(p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0 &&
               2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w,
           "pool2d: bad window " << p.kernel_h << "x" << p.kernel_w << " stride " << p.stride_h << "x" << p.stride_w
                                 << " pad " << p.pad_h << "x" << p.pad_w);
  const std::int64_t hp = x[2] + 2 * p.pad_h, wp = x[3] + 2 * p.pad_w;
  PW_CHECK(hp >= p.kernel_h && wp >= p.kernel_w, "pool2d: window larger than the padded input " << shape_str(x));
  return {x[0], x[1], (hp - p.kernel_h) / p.stride_h + 1, (wp - p.kernel_w) / p.stride_w + 1};
}

void require_4d(const Tensor& t, const char* what) {
  detail::require_cuda_float(t, what);
  PW_CHECK(t.ndim() == 4, "" << what << " must be [N, C, H, W], got " << t.describe());
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dParams& p) {
  require_4d(x, "max_pool2d_forward: x");
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  const Shape ys = pooled_shape(x.shape(), p);
  const PoolGeom g = make_geom(x.shape(), ys[2], ys[3], &p);
  MaxPoolResult r{Tensor::empty(ys, x.dtype(), dev), Tensor::empty(ys, DType::I32, dev)};
  const std::int64_t n = r.y.numel();
  if (n == 0) return r;
  detail::visit_cuda_float(x.dtype(), "max_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    max_pool_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(x.data<T>(), r.y.data<T>(),
                                                                                r.workspace.data<std::int32_t>(), g);
  });
  PW_CUDA_CHECK_LAUNCH();
  return r;
}

Tensor max_pool2d_backward(const Tensor& grad_y, const Tensor& workspace, const Shape& x_shape, const Pool2dParams& p) {
  require_4d(grad_y, "max_pool2d_backward: grad_y");
  const Device dev = grad_y.device();
  CudaDeviceGuard guard(dev.index);
  const Shape ys = pooled_shape(x_shape, p);
  PW_CHECK(grad_y.shape() == ys, "max_pool2d_backward: grad_y " << grad_y.describe() << ", expected " << shape_str(ys));
  PW_CHECK(workspace.dtype() == DType::I32 && workspace.shape() == ys && workspace.device() == dev,
           "max_pool2d_backward: workspace " << workspace.describe()
                                             << " is not the CUDA max_pool2d_forward workspace for " << shape_str(ys));
  const PoolGeom g = make_geom(x_shape, ys[2], ys[3], &p);
  Tensor grad_x = Tensor::empty(x_shape, grad_y.dtype(), dev);
  const std::int64_t n = grad_x.numel();
  if (n == 0) return grad_x;
  detail::visit_cuda_float(grad_y.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    max_pool_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(
        grad_y.data<T>(), workspace.data<std::int32_t>(), grad_x.data<T>(), g);
  });
  PW_CUDA_CHECK_LAUNCH();
  return grad_x;
}

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p) {
  require_4d(x, "avg_pool2d_forward: x");
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  const Shape ys = pooled_shape(x.shape(), p);
  const PoolGeom g = make_geom(x.shape(), ys[2], ys[3], &p);
  Tensor y = Tensor::empty(ys, x.dtype(), dev);
  const std::int64_t n = y.numel();
  if (n == 0) return y;
  detail::visit_cuda_float(x.dtype(), "avg_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    avg_pool_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(x.data<T>(), y.data<T>(), g);
  });
  PW_CUDA_CHECK_LAUNCH();
  return y;
}

Tensor avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape, const Pool2dParams& p) {
  require_4d(grad_y, "avg_pool2d_backward: grad_y");
  const Device dev = grad_y.device();
  CudaDeviceGuard guard(dev.index);
  const Shape ys = pooled_shape(x_shape, p);
  PW_CHECK(grad_y.shape() == ys, "avg_pool2d_backward: grad_y " << grad_y.describe() << ", expected " << shape_str(ys));
  const PoolGeom g = make_geom(x_shape, ys[2], ys[3], &p);
  Tensor grad_x = Tensor::empty(x_shape, grad_y.dtype(), dev);
  const std::int64_t n = grad_x.numel();
  if (n == 0) return grad_x;
  detail::visit_cuda_float(grad_y.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    avg_pool_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(grad_y.data<T>(), grad_x.data<T>(), g);
  });
  PW_CUDA_CHECK_LAUNCH();
  return grad_x;
}

Tensor adaptive_avg_pool2d_forward(const Tensor& x, int out_h, int out_w) {
  require_4d(x, "adaptive_avg_pool2d_forward: x");
  PW_CHECK(out_h >= 1 && out_w >= 1 && x.dim(2) >= 1 && x.dim(3) >= 1,
           "adaptive_avg_pool2d_forward: " << x.describe() << " to " << out_h << "x" << out_w);
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  const PoolGeom g = make_geom(x.shape(), out_h, out_w, nullptr);
  Tensor y = Tensor::empty({x.dim(0), x.dim(1), out_h, out_w}, x.dtype(), dev);
  const std::int64_t n = y.numel();
  if (n == 0) return y;
  detail::visit_cuda_float(x.dtype(), "adaptive_avg_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    adaptive_avg_pool_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(x.data<T>(), y.data<T>(), g);
  });
  PW_CUDA_CHECK_LAUNCH();
  return y;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape) {
  require_4d(grad_y, "adaptive_avg_pool2d_backward: grad_y");
  PW_CHECK(x_shape.size() == 4 && x_shape[0] == grad_y.dim(0) && x_shape[1] == grad_y.dim(1) && x_shape[2] >= 1 &&
               x_shape[3] >= 1,
           "adaptive_avg_pool2d_backward: input " << shape_str(x_shape) << " vs grad_y " << grad_y.describe());
  const Device dev = grad_y.device();
  CudaDeviceGuard guard(dev.index);
  const PoolGeom g = make_geom(x_shape, grad_y.dim(2), grad_y.dim(3), nullptr);
  Tensor grad_x = Tensor::empty(x_shape, grad_y.dtype(), dev);
  const std::int64_t n = grad_x.numel();
  if (n == 0) return grad_x;
  if (g.oh == 0 || g.ow == 0) {
    grad_x.zero_();
    return grad_x;
  }
  detail::visit_cuda_float(grad_y.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    adaptive_avg_pool_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(grad_y.data<T>(),
                                                                                          grad_x.data<T>(), g);
  });
  PW_CUDA_CHECK_LAUNCH();
  return grad_x;
}

}  // namespace pw::kernels::cuda
