#pragma once
// DLRM's feature interaction: the input row holds V vectors of width D, [N, V*D] (the bottom-MLP
// output first, then one per sparse feature). The output is that first vector followed by the
// dot products of every pair i > j in row-major order of the strictly lower triangle:
// [N, D + V(V-1)/2]. Host loops (F32 or F64), staged through the host on other devices.
#include "models/layer.h"

namespace pw::models {

class DotInteraction : public Layer {
 public:
  DotInteraction(int vectors, int dim);
  std::string type_name() const override { return "DotInteraction"; }
  int output_width() const { return dim_ + vectors_ * (vectors_ - 1) / 2; }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;
  LowPrecisionInput low_precision_input() const override { return LowPrecisionInput::No; }

 private:
  int vectors_, dim_;
};

}  // namespace pw::models
