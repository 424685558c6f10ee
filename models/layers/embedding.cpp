#include "models/layers/embedding.h"

#include "kernels/ops/embedding.h"

namespace pw::models {
namespace {
struct EmbeddingContext : Context {
  Tensor ids;
};
}  // namespace

Embedding::Embedding(std::int64_t num_embeddings, int dim) : num_embeddings_(num_embeddings), dim_(dim) {
  PW_CHECK(num_embeddings > 0 && dim > 0, "bad Embedding size " << num_embeddings << "x" << dim);
  weight_ = &add_parameter("weight", {num_embeddings, dim}, Init::normal(1.0));
}

Shape Embedding::output_shape_impl(const Shape& input) const {
  PW_CHECK(input.size() == 1, "Embedding expects ids [N], got " << shape_str(input));
  return {input[0], dim_};
}

Layer::Output Embedding::forward_impl(const Tensor& ids, Mode) {
  auto ctx = std::make_unique<EmbeddingContext>();
  ctx->ids = ids;
  return {kernels::embedding_gather(weight_->value, ids), std::move(ctx)};
}

// Ids carry no gradient; an empty tensor of the ids' shape stands for "none".
Tensor Embedding::backward_input_impl(Context& ctx, const Tensor&) {
  return Tensor::zeros(ctx.input_shape, kernels::DType::F32, device_);
}

void Embedding::backward_weight_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<EmbeddingContext&>(ctx);
  kernels::embedding_scatter_add(weight_->grad, c.ids, grad_y);
  c.ids = Tensor();
}

}  // namespace pw::models
