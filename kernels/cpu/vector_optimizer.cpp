#include "kernels/cpu/vector_optimizer.h"

#include <immintrin.h>

#include <cmath>

#include "core/error.h"

namespace pw::kernels::cpu {
namespace {

// The reference's element updates, used by the scalar path and for the vector paths' tails.
inline void adam_scalar(float* w, const float* g, float* m, float* v, std::int64_t begin, std::int64_t end,
                        const AdamStepConstants& c) {
  for (std::int64_t i = begin; i < end; ++i) {
    const float d = c.decay ? g[i] + c.wd * w[i] : g[i];
    m[i] = m[i] * c.b1 + c.one_minus_b1 * d;
    v[i] = v[i] * c.b2 + c.one_minus_b2 * d * d;
    const float denom = std::sqrt(v[i]) / c.bias2_sqrt + c.eps;
    w[i] -= c.step_size * (m[i] / denom);
  }
}

inline void sgd_scalar(float* w, const float* g, float* buf, std::int64_t begin, std::int64_t end,
                       const SgdStepConstants& c) {
  for (std::int64_t i = begin; i < end; ++i) {
    float d = c.decay ? g[i] + c.wd * w[i] : g[i];
    if (c.momentum) {
      buf[i] = c.first_step ? d : c.mu * buf[i] + d;
      d = buf[i];
    }
    w[i] -= c.lr * d;
  }
}

inline void adagrad_scalar(float* w, const float* g, float* acc, std::int64_t begin, std::int64_t end,
                           const AdagradStepConstants& c) {
  for (std::int64_t i = begin; i < end; ++i) {
    const float d = c.decay ? g[i] + c.wd * w[i] : g[i];
    acc[i] += d * d;
    w[i] -= c.lr * (d / (std::sqrt(acc[i]) + c.eps));
  }
}

// AVX2: 8 lanes. Each line is one of the reference's operations.
__attribute__((target("avx2"))) void adam_avx2(float* w, const float* g, float* m, float* v, std::int64_t n,
                                               const AdamStepConstants& c) {
  const __m256 b1 = _mm256_set1_ps(c.b1), b2 = _mm256_set1_ps(c.b2), omb1 = _mm256_set1_ps(c.one_minus_b1),
               omb2 = _mm256_set1_ps(c.one_minus_b2), bias2 = _mm256_set1_ps(c.bias2_sqrt),
               eps = _mm256_set1_ps(c.eps), step = _mm256_set1_ps(c.step_size), wd = _mm256_set1_ps(c.wd);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wi = _mm256_loadu_ps(w + i);
    __m256 d = _mm256_loadu_ps(g + i);
    if (c.decay) d = _mm256_add_ps(d, _mm256_mul_ps(wd, wi));
    const __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(omb1, d));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2), _mm256_mul_ps(_mm256_mul_ps(omb2, d), d));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bias2), eps);
    wi = _mm256_sub_ps(wi, _mm256_mul_ps(step, _mm256_div_ps(mi, denom)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(w + i, wi);
  }
  adam_scalar(w, g, m, v, i, n, c);
}

__attribute__((target("avx512f"))) void adam_avx512(float* w, const float* g, float* m, float* v, std::int64_t n,
                                                    const AdamStepConstants& c) {
  const __m512 b1 = _mm512_set1_ps(c.b1), b2 = _mm512_set1_ps(c.b2), omb1 = _mm512_set1_ps(c.one_minus_b1),
               omb2 = _mm512_set1_ps(c.one_minus_b2), bias2 = _mm512_set1_ps(c.bias2_sqrt),
               eps = _mm512_set1_ps(c.eps), step = _mm512_set1_ps(c.step_size), wd = _mm512_set1_ps(c.wd);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 wi = _mm512_loadu_ps(w + i);
    __m512 d = _mm512_loadu_ps(g + i);
    if (c.decay) d = _mm512_add_ps(d, _mm512_mul_ps(wd, wi));
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(m + i), b1), _mm512_mul_ps(omb1, d));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + i), b2), _mm512_mul_ps(_mm512_mul_ps(omb2, d), d));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bias2), eps);
    wi = _mm512_sub_ps(wi, _mm512_mul_ps(step, _mm512_div_ps(mi, denom)));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    _mm512_storeu_ps(w + i, wi);
  }
  adam_scalar(w, g, m, v, i, n, c);
}

__attribute__((target("avx2"))) void sgd_avx2(float* w, const float* g, float* buf, std::int64_t n,
                                              const SgdStepConstants& c) {
  const __m256 lr = _mm256_set1_ps(c.lr), wd = _mm256_set1_ps(c.wd), mu = _mm256_set1_ps(c.mu);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wi = _mm256_loadu_ps(w + i);
    __m256 d = _mm256_loadu_ps(g + i);
    if (c.decay) d = _mm256_add_ps(d, _mm256_mul_ps(wd, wi));
    if (c.momentum) {
      if (!c.first_step) d = _mm256_add_ps(_mm256_mul_ps(mu, _mm256_loadu_ps(buf + i)), d);
      _mm256_storeu_ps(buf + i, d);
    }
    _mm256_storeu_ps(w + i, _mm256_sub_ps(wi, _mm256_mul_ps(lr, d)));
  }
  sgd_scalar(w, g, buf, i, n, c);
}

__attribute__((target("avx512f"))) void sgd_avx512(float* w, const float* g, float* buf, std::int64_t n,
                                                   const SgdStepConstants& c) {
  const __m512 lr = _mm512_set1_ps(c.lr), wd = _mm512_set1_ps(c.wd), mu = _mm512_set1_ps(c.mu);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 wi = _mm512_loadu_ps(w + i);
    __m512 d = _mm512_loadu_ps(g + i);
    if (c.decay) d = _mm512_add_ps(d, _mm512_mul_ps(wd, wi));
    if (c.momentum) {
      if (!c.first_step) d = _mm512_add_ps(_mm512_mul_ps(mu, _mm512_loadu_ps(buf + i)), d);
      _mm512_storeu_ps(buf + i, d);
    }
    _mm512_storeu_ps(w + i, _mm512_sub_ps(wi, _mm512_mul_ps(lr, d)));
  }
  sgd_scalar(w, g, buf, i, n, c);
}

__attribute__((target("avx2"))) void adagrad_avx2(float* w, const float* g, float* acc, std::int64_t n,
                                                  const AdagradStepConstants& c) {
  const __m256 lr = _mm256_set1_ps(c.lr), wd = _mm256_set1_ps(c.wd), eps = _mm256_set1_ps(c.eps);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wi = _mm256_loadu_ps(w + i);
    __m256 d = _mm256_loadu_ps(g + i);
    if (c.decay) d = _mm256_add_ps(d, _mm256_mul_ps(wd, wi));
    const __m256 ai = _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(d, d));
    _mm256_storeu_ps(acc + i, ai);
    const __m256 q = _mm256_div_ps(d, _mm256_add_ps(_mm256_sqrt_ps(ai), eps));
    _mm256_storeu_ps(w + i, _mm256_sub_ps(wi, _mm256_mul_ps(lr, q)));
  }
  adagrad_scalar(w, g, acc, i, n, c);
}

__attribute__((target("avx512f"))) void adagrad_avx512(float* w, const float* g, float* acc, std::int64_t n,
                                                       const AdagradStepConstants& c) {
  const __m512 lr = _mm512_set1_ps(c.lr), wd = _mm512_set1_ps(c.wd), eps = _mm512_set1_ps(c.eps);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 wi = _mm512_loadu_ps(w + i);
    __m512 d = _mm512_loadu_ps(g + i);
    if (c.decay) d = _mm512_add_ps(d, _mm512_mul_ps(wd, wi));
    const __m512 ai = _mm512_add_ps(_mm512_loadu_ps(acc + i), _mm512_mul_ps(d, d));
    _mm512_storeu_ps(acc + i, ai);
    const __m512 q = _mm512_div_ps(d, _mm512_add_ps(_mm512_sqrt_ps(ai), eps));
    _mm512_storeu_ps(w + i, _mm512_sub_ps(wi, _mm512_mul_ps(lr, q)));
  }
  adagrad_scalar(w, g, acc, i, n, c);
}

void check_supported(VectorIsa isa) {
  PW_CHECK(vector_isa_supported(isa), "this CPU cannot run the " << vector_isa_name(isa) << " optimizer update");
}

}  // namespace

const char* vector_isa_name(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::Scalar: return "scalar";
    case VectorIsa::Avx2: return "avx2";
    case VectorIsa::Avx512: return "avx512";
  }
  return "?";
}

bool vector_isa_supported(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::Scalar: return true;
    case VectorIsa::Avx2: return __builtin_cpu_supports("avx2");
    case VectorIsa::Avx512: return __builtin_cpu_supports("avx512f");
  }
  return false;
}

VectorIsa best_vector_isa() {
  static const VectorIsa best = vector_isa_supported(VectorIsa::Avx512) ? VectorIsa::Avx512
                                : vector_isa_supported(VectorIsa::Avx2) ? VectorIsa::Avx2
                                                                        : VectorIsa::Scalar;
  return best;
}

AdamStepConstants adam_step_constants(const AdamParams& p, std::int64_t step) {
  const double bias1 = 1.0 - std::pow(p.beta1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(p.beta2, static_cast<double>(step));
  return {static_cast<float>(p.lr / bias1),      static_cast<float>(std::sqrt(bias2)),
          static_cast<float>(p.beta1),           static_cast<float>(p.beta2),
          static_cast<float>(1.0 - p.beta1),     static_cast<float>(1.0 - p.beta2),
          static_cast<float>(p.eps),             static_cast<float>(p.weight_decay),
          p.weight_decay != 0.0};
}

SgdStepConstants sgd_step_constants(const SgdParams& p, std::int64_t step) {
  return {static_cast<float>(p.lr), static_cast<float>(p.weight_decay), static_cast<float>(p.momentum),
          p.weight_decay != 0.0, p.momentum != 0.0, step == 1};
}

AdagradStepConstants adagrad_step_constants(const AdagradParams& p) {
  return {static_cast<float>(p.lr), static_cast<float>(p.eps), static_cast<float>(p.weight_decay),
          p.weight_decay != 0.0};
}

void adam_update_f32(VectorIsa isa, float* w, const float* g, float* m, float* v, std::int64_t n,
                     const AdamStepConstants& c) {
  check_supported(isa);
  switch (isa) {
    case VectorIsa::Avx512: adam_avx512(w, g, m, v, n, c); return;
    case VectorIsa::Avx2: adam_avx2(w, g, m, v, n, c); return;
    case VectorIsa::Scalar: adam_scalar(w, g, m, v, 0, n, c); return;
  }
}

void sgd_update_f32(VectorIsa isa, float* w, const float* g, float* buf, std::int64_t n, const SgdStepConstants& c) {
  check_supported(isa);
  switch (isa) {
    case VectorIsa::Avx512: sgd_avx512(w, g, buf, n, c); return;
    case VectorIsa::Avx2: sgd_avx2(w, g, buf, n, c); return;
    case VectorIsa::Scalar: sgd_scalar(w, g, buf, 0, n, c); return;
  }
}

void adagrad_update_f32(VectorIsa isa, float* w, const float* g, float* sum_sq, std::int64_t n,
                        const AdagradStepConstants& c) {
  check_supported(isa);
  switch (isa) {
    case VectorIsa::Avx512: adagrad_avx512(w, g, sum_sq, n, c); return;
    case VectorIsa::Avx2: adagrad_avx2(w, g, sum_sq, n, c); return;
    case VectorIsa::Scalar: adagrad_scalar(w, g, sum_sq, 0, n, c); return;
  }
}

}  // namespace pw::kernels::cpu
