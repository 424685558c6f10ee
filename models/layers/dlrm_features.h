#pragma once
// The first block of DLRM: reads one packed click row (data/click_features.h), runs the dense
// columns through the bottom MLP and each sparse feature's id columns through its embedding bag,
// and concatenates the results: [N, width] -> [N, (1 + S) * dim], the bottom output first.
//
// The bags are any layers mapping I64 ids [N, bag] to [N, dim] (a local EmbeddingBag, or one a job
// builds in its place, a server-backed bag, models/remote_table.h). The packed input carries no gradient: backward returns zeros.
#include <memory>
#include <vector>

#include "models/data/click_features.h"
#include "models/layer.h"

namespace pw::models {

class DlrmFeatures : public Layer {
 public:
  // bottom: [N, dense] -> [N, dim]; bags[f]: I64 [N, bag_size] -> [N, dim].
  DlrmFeatures(data::ClickFeatures features, int dim, std::unique_ptr<Layer> bottom,
               std::vector<std::unique_ptr<Layer>> bags);
  std::string type_name() const override { return "DlrmFeatures"; }
  std::int64_t activation_elements(const Shape& input) const override;
  // Packed click rows: dense columns uniform in [-1, 1), each id column an id of its table.
  Tensor example_input(const Shape& shape, kernels::Device device, std::uint64_t seed) const override;

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  void backward_weight_impl(Context& ctx, const Tensor& grad_y) override;
  Tensor backward_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;

 private:
  void children_backward(Context& ctx, const Tensor& grad_y);

  data::ClickFeatures features_;
  int dim_;
};

// Ids of sparse feature `feature` from packed rows x [N, width] (F32) as I64 [N, bag]; an
// InputError names any value that is not a non-negative integer below 2^24.
Tensor unpack_bag_ids(const Tensor& x, const data::ClickFeatures& features, int feature);

}  // namespace pw::models
