#include "kernels/ops/embedding.h"

#include "kernels/dispatch.h"
#include "kernels/ops/validate.h"

namespace pw::kernels {

// Ids are range-checked by the backend, where they can be read without a device-to-host copy.

Tensor embedding_gather(const Tensor& table, const Tensor& ids) {
  constexpr const char* op = "embedding_gather";
  detail::check_ndim(op, {table, "table"}, 2, "[V, D]");
  detail::check_full_precision(op, {table, "table"});
  detail::check_ndim(op, {ids, "ids"}, 1, "[N]");
  detail::check_dtype_is(op, {ids, "ids"}, DType::I64);
  const Device device = detail::check_same_device(op, {{table, "table"}, {ids, "ids"}});
  return PW_DISPATCH(device, embedding_gather, table, ids);
}

void embedding_scatter_add(Tensor& grad_table, const Tensor& ids, const Tensor& grad_rows) {
  constexpr const char* op = "embedding_scatter_add";
  detail::check_ndim(op, {grad_table, "grad_table"}, 2, "[V, D]");
  detail::check_ndim(op, {ids, "ids"}, 1, "[N]");
  detail::check_dtype_is(op, {ids, "ids"}, DType::I64);
  detail::check_shape_is(op, {grad_rows, "grad_rows"}, {ids.dim(0), grad_table.dim(1)});
  detail::check_full_precision(op, {grad_table, "grad_table"});
  detail::check_same_float_dtype(op, {{grad_table, "grad_table"}, {grad_rows, "grad_rows"}});
  const Device device =
      detail::check_same_device(op, {{grad_table, "grad_table"}, {ids, "ids"}, {grad_rows, "grad_rows"}});
  PW_DISPATCH(device, embedding_scatter_add, grad_table, ids, grad_rows);
}

}  // namespace pw::kernels
