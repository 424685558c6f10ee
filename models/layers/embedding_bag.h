#pragma once
// EmbeddingBag: each sample looks up a fixed-size bag of ids and pools the rows (sum or mean).
//
// The math is factored so a bag whose table is kept elsewhere can reuse it on the rows it fetched:
//   unique_bag_ids(ids)              -> the batch's distinct ids [U] and an index [B, bag] into them
//   bag_pool_forward(rows, index)    -> [B, D] from rows [U, D]
//   bag_pool_backward(grad, index)   -> per-unique-row gradients [U, D] (what such a bag sends back)
// The local EmbeddingBag below runs exactly these three steps against its own table.
#include <cstdint>
#include <string>

#include "models/layer.h"

namespace pw::models {

// BagMode: pipewright/model.h.

struct UniqueIds {
  Tensor ids;     // I64 [U], distinct, ascending
  Tensor index;   // I64 [B, bag], index[b][k] is the position of ids_in[b][k] in `ids`
};

// ids: I64 [B, bag] on the CPU. Ids are not range-checked here (the key space may be unbounded).
UniqueIds unique_bag_ids(const Tensor& ids);

// rows [U, D] (F32 or F64), index I64 [B, bag] with values in [0, U) -> pooled [B, D], rows' dtype.
Tensor bag_pool_forward(const Tensor& rows, const Tensor& index, BagMode mode);
// grad_out [B, D], index [B, bag] -> gradient of every row [U, D] (rows used twice add up).
Tensor bag_pool_backward(const Tensor& grad_out, const Tensor& index, std::int64_t unique_rows, BagMode mode);

// The ids of a bag layer's input [B, bag] as I64 on the input's device: I64 as it is, or F32/F64
// holding whole numbers (a model's input, or an activation from the stage before; F32 is exact up
// to 2^24). InputError naming `layer`, the first value that is not such a number, or the shape.
Tensor bag_ids_of(const Tensor& input, std::int64_t bag_size, const std::string& layer);

// Checks ids [B, bag] (I64) against a table of `num_embeddings` rows; an InputError names the
// first bad id, its position and the table size.
void check_bag_ids(const Tensor& ids, std::int64_t num_embeddings, std::int64_t bag_size);

// The bound of a table's initial values, sqrt(1/rows) as in DLRM.
double embedding_bag_init_scale(std::int64_t rows);

// A local table [num_embeddings, dim] (weight, uniform in +-sqrt(1/num_embeddings) as in DLRM, row
// by row from the parameter's seed: Init::keyed_rows). Input: I64 ids [B, bag] with a
// fixed bag size (every sample has exactly `bag_size` ids; repeat an id, or reserve a padding id,
// for shorter bags). Output [B, dim]. Backward adds into weight.grad (dense accumulate) and
// returns zeros for the ids, which carry no gradient.
class EmbeddingBag : public Layer {
 public:
  EmbeddingBag(std::int64_t num_embeddings, int dim, int bag_size, BagMode mode);
  std::string type_name() const override { return "EmbeddingBag"; }
  std::int64_t num_embeddings() const { return num_embeddings_; }
  int dim() const { return dim_; }
  BagMode mode() const { return mode_; }

 protected:
  Output forward_impl(const Tensor& ids, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  void backward_weight_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;

 private:
  std::int64_t num_embeddings_;
  int dim_;
  int bag_size_;
  BagMode mode_;
  Parameter* weight_;
};

}  // namespace pw::models
