#pragma once
// Embedding rows: gather table[ids] and scatter-add gradients back into a table.
#include "kernels/tensor.h"

namespace pw::kernels {

// table [V, D], ids I64 [N] -> [N, D]. Ids out of [0, V) are an error.
Tensor embedding_gather(const Tensor& table, const Tensor& ids);
// grad_table[ids[i]] += grad_rows[i] (repeated ids add up).
void embedding_scatter_add(Tensor& grad_table, const Tensor& ids, const Tensor& grad_rows);

}  // namespace pw::kernels
