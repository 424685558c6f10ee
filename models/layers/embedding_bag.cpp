#include "models/layers/embedding_bag.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops/embedding.h"

namespace pw::models {
namespace {

using kernels::DType;

// Host loops read CPU tensors in place; other devices are staged through the host.
Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }
Device host_device_for(const Tensor& t) { return t.device().is_cpu() ? t.device() : Device::cpu(); }

void check_index(const char* op, const Tensor& index) {
  PW_CHECK(index.ndim() == 2 && index.dtype() == DType::I64,
           op << ": index must be I64 [B, bag], got " << index.describe());
}

template <typename T>
void pool_forward(const T* rows, std::int64_t u, std::int64_t d, const std::int64_t* index, std::int64_t b,
                  std::int64_t bag, double scale, T* out) {
  for (std::int64_t i = 0; i < b; ++i) {
    T* y = out + i * d;
    std::fill(y, y + d, T(0));
    for (std::int64_t k = 0; k < bag; ++k) {
      const std::int64_t r = index[i * bag + k];
      PW_CHECK(r >= 0 && r < u, "bag_pool_forward: index " << r << " at [" << i << ", " << k << "] outside [0, " << u << ")");
      const T* row = rows + r * d;
      for (std::int64_t j = 0; j < d; ++j) y[j] += row[j];
    }
    for (std::int64_t j = 0; j < d; ++j) y[j] = static_cast<T>(y[j] * scale);
  }
}

template <typename T>
void pool_backward(const T* grad, std::int64_t d, const std::int64_t* index, std::int64_t b, std::int64_t bag,
                   std::int64_t u, double scale, T* grad_rows) {
  for (std::int64_t i = 0; i < b; ++i) {
    const T* g = grad + i * d;
    for (std::int64_t k = 0; k < bag; ++k) {
      const std::int64_t r = index[i * bag + k];
      PW_CHECK(r >= 0 && r < u, "bag_pool_backward: index " << r << " at [" << i << ", " << k << "] outside [0, " << u << ")");
      T* out = grad_rows + r * d;
      for (std::int64_t j = 0; j < d; ++j) out[j] += static_cast<T>(g[j] * scale);
    }
  }
}

double bag_scale(BagMode mode, std::int64_t bag) { return mode == BagMode::Mean ? 1.0 / static_cast<double>(bag) : 1.0; }

struct EmbeddingBagContext : Context {
  UniqueIds unique;
  DType input_dtype = DType::I64;   // the input gradient's (zeros)
};

}  // namespace

UniqueIds unique_bag_ids(const Tensor& ids) {
  check_index("unique_bag_ids", ids);
  const Tensor host = on_host(ids);
  const std::int64_t* v = host.data<std::int64_t>();
  const std::int64_t n = host.numel();
  std::vector<std::int64_t> sorted(v, v + n);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::vector<std::int64_t> index(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    index[static_cast<std::size_t>(i)] = std::lower_bound(sorted.begin(), sorted.end(), v[i]) - sorted.begin();
  }
  const auto u = static_cast<std::int64_t>(sorted.size());
  return {Tensor::from_vector(sorted, {u}, ids.device()), Tensor::from_vector(index, ids.shape(), ids.device())};
}

Tensor bag_pool_forward(const Tensor& rows, const Tensor& index, BagMode mode) {
  check_index("bag_pool_forward", index);
  PW_CHECK(rows.ndim() == 2 && (rows.dtype() == DType::F32 || rows.dtype() == DType::F64),
           "bag_pool_forward: rows must be F32 or F64 [U, D], got " << rows.describe());
  const Tensor r = on_host(rows), idx = on_host(index);
  const std::int64_t b = idx.dim(0), bag = idx.dim(1), u = r.dim(0), d = r.dim(1);
  PW_CHECK(bag >= 1, "bag_pool_forward: empty bags " << index.describe());
  Tensor out = Tensor::empty({b, d}, rows.dtype(), host_device_for(rows));
  const double scale = bag_scale(mode, bag);
  if (rows.dtype() == DType::F64) {
    pool_forward(r.data<double>(), u, d, idx.data<std::int64_t>(), b, bag, scale, out.data<double>());
  } else {
    pool_forward(r.data<float>(), u, d, idx.data<std::int64_t>(), b, bag, scale, out.data<float>());
  }
  return out.to(rows.device());
}

Tensor bag_pool_backward(const Tensor& grad_out, const Tensor& index, std::int64_t unique_rows, BagMode mode) {
  check_index("bag_pool_backward", index);
  PW_CHECK(grad_out.ndim() == 2 && grad_out.dim(0) == index.dim(0) &&
               (grad_out.dtype() == DType::F32 || grad_out.dtype() == DType::F64),
           "bag_pool_backward: grad_out must be F32 or F64 [" << index.dim(0) << ", D], got " << grad_out.describe());
  PW_CHECK(unique_rows >= 0, "bag_pool_backward: negative row count " << unique_rows);
  const Tensor g = on_host(grad_out), idx = on_host(index);
  const std::int64_t b = idx.dim(0), bag = idx.dim(1), d = g.dim(1);
  Tensor out = Tensor::zeros({unique_rows, d}, grad_out.dtype(), host_device_for(grad_out));
  const double scale = bag_scale(mode, bag);
  if (grad_out.dtype() == DType::F64) {
    pool_backward(g.data<double>(), d, idx.data<std::int64_t>(), b, bag, unique_rows, scale, out.data<double>());
  } else {
    pool_backward(g.data<float>(), d, idx.data<std::int64_t>(), b, bag, unique_rows, scale, out.data<float>());
  }
  return out.to(grad_out.device());
}

Tensor bag_ids_of(const Tensor& input, std::int64_t bag_size, const std::string& layer) {
  PW_INPUT_CHECK(input.ndim() == 2 && input.dim(1) == bag_size,
                 layer << " expects ids [batch, " << bag_size << "], got " << input.describe());
  if (input.dtype() == DType::I64) return input;
  PW_INPUT_CHECK(input.dtype() == DType::F32 || input.dtype() == DType::F64,
                 layer << " expects ids as I64, or as F32/F64 whole numbers; got " << input.describe());
  // Every whole number up to 2^24 (F32) or 2^53 (F64) is exact; larger ids must come as I64.
  const double exact = input.dtype() == DType::F32 ? 16777216.0 : 9007199254740992.0;
  const auto values = on_host(input).to_double_vector();
  std::vector<std::int64_t> ids(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    PW_INPUT_CHECK(std::isfinite(v) && v == std::floor(v) && std::fabs(v) <= exact,
                   layer << ": input " << v << " at [" << static_cast<std::int64_t>(i) / bag_size << ", "
                         << static_cast<std::int64_t>(i) % bag_size << "] is not a whole number of at most " << exact
                         << " (an id; larger ids come as I64)");
    ids[i] = static_cast<std::int64_t>(v);
  }
  return Tensor::from_vector(ids, input.shape(), host_device_for(input)).to(input.device());
}

void check_bag_ids(const Tensor& ids, std::int64_t num_embeddings, std::int64_t bag_size) {
  PW_INPUT_CHECK(ids.ndim() == 2 && ids.dtype() == DType::I64 && ids.dim(1) == bag_size,
                 "EmbeddingBag expects I64 ids [batch, " << bag_size << "], got " << ids.describe());
  const Tensor host = on_host(ids);
  const std::int64_t* v = host.data<std::int64_t>();
  for (std::int64_t i = 0; i < host.numel(); ++i) {
    PW_INPUT_CHECK(v[i] >= 0 && v[i] < num_embeddings,
                   "EmbeddingBag: id " << v[i] << " at [" << i / bag_size << ", " << i % bag_size
                                       << "] is outside the table of " << num_embeddings << " rows (ids 0.."
                                       << num_embeddings - 1 << ")");
  }
}

double embedding_bag_init_scale(std::int64_t rows) { return std::sqrt(1.0 / static_cast<double>(rows)); }

EmbeddingBag::EmbeddingBag(std::int64_t num_embeddings, int dim, int bag_size, BagMode mode)
    : num_embeddings_(num_embeddings), dim_(dim), bag_size_(bag_size), mode_(mode) {
  PW_INPUT_CHECK(num_embeddings > 0 && dim > 0 && bag_size > 0,
                 "EmbeddingBag needs positive rows, dim and bag size, got " << num_embeddings << " x " << dim
                                                                             << ", bag " << bag_size);
  // DLRM's reference initialisation, uniform in +-sqrt(1/rows), drawn per row from (seed, id) so a
  // table built row by row elsewhere from the same seed holds the same rows.
  weight_ = &add_parameter("weight", {num_embeddings, dim}, Init::keyed_rows(embedding_bag_init_scale(num_embeddings)));
}

Shape EmbeddingBag::output_shape_impl(const Shape& input) const {
  PW_INPUT_CHECK(input.size() == 2 && input[1] == bag_size_,
                 "EmbeddingBag expects ids [batch, " << bag_size_ << "], got " << shape_str(input));
  return {input[0], dim_};
}

Layer::Output EmbeddingBag::forward_impl(const Tensor& input, Mode) {
  const Tensor ids = bag_ids_of(input, bag_size_, "EmbeddingBag");
  check_bag_ids(ids, num_embeddings_, bag_size_);
  auto ctx = std::make_unique<EmbeddingBagContext>();
  ctx->input_dtype = input.dtype();
  ctx->unique = unique_bag_ids(ids);
  const Tensor rows = kernels::embedding_gather(weight_->value, ctx->unique.ids);
  Tensor y = bag_pool_forward(rows, ctx->unique.index, mode_);
  return {std::move(y), std::move(ctx)};
}

Tensor EmbeddingBag::backward_input_impl(Context& ctx, const Tensor&) {
  return Tensor::zeros(ctx.input_shape, static_cast<EmbeddingBagContext&>(ctx).input_dtype, device_);
}

void EmbeddingBag::backward_weight_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<EmbeddingBagContext&>(ctx);
  const Tensor grad_rows = bag_pool_backward(grad_y, c.unique.index, c.unique.ids.dim(0), mode_);
  kernels::embedding_scatter_add(weight_->grad, c.unique.ids, grad_rows);
  c.unique = {};
}

}  // namespace pw::models
