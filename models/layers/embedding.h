#pragma once
#include "models/layer.h"

namespace pw::models {

// A dense embedding table [num_embeddings, dim]: I64 ids [N] -> rows [N, dim]; N(0, 1) init.
class Embedding : public Layer {
 public:
  Embedding(std::int64_t num_embeddings, int dim);
  std::string type_name() const override { return "Embedding"; }

 protected:
  Output forward_impl(const Tensor& ids, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  void backward_weight_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;

 private:
  std::int64_t num_embeddings_;
  int dim_;
  Parameter* weight_;
};

}  // namespace pw::models
