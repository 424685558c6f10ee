// Embedding gather / scatter-add on the CPU (OpenMP loops, see parallel.h). The scatter groups rows by id and lets
// one task own each id, so repeated ids add up in batch order without atomics (repeatable sums).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {

namespace {

void check_ids(const char* op, const Tensor& ids, std::int64_t vocab) {
  const std::int64_t* is = ids.data<std::int64_t>();
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    PW_CHECK(is[i] >= 0 && is[i] < vocab, "" << op << ": id " << is[i] << " at position " << i
                                             << " is out of range [0, " << vocab << ") of the table");
  }
}

}  // namespace

Tensor embedding_gather(const Tensor& table, const Tensor& ids) {
  const std::int64_t vocab = table.dim(0), width = table.dim(1), n = ids.dim(0);
  check_ids("embedding_gather", ids, vocab);
  Tensor rows = Tensor::empty({n, width}, table.dtype(), table.device());
  const std::size_t row_bytes = static_cast<std::size_t>(width) * dtype_size(table.dtype());
  const auto* src = static_cast<const std::uint8_t*>(table.raw());
  auto* dst = static_cast<std::uint8_t*>(rows.raw());
  const std::int64_t* is = ids.data<std::int64_t>();
  parallel_chunks(n, 64, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      std::memcpy(dst + static_cast<std::size_t>(i) * row_bytes, src + static_cast<std::size_t>(is[i]) * row_bytes,
                  row_bytes);
  });
  return rows;
}

void embedding_scatter_add(Tensor& grad_table, const Tensor& ids, const Tensor& grad_rows) {
  const std::int64_t vocab = grad_table.dim(0), width = grad_table.dim(1), n = ids.dim(0);
  check_ids("embedding_scatter_add", ids, vocab);
  const std::int64_t* is = ids.data<std::int64_t>();
  // Positions sorted by id (stable: batch order within an id), then split into runs of one id.
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [is](std::int64_t a, std::int64_t b) { return is[a] < is[b]; });
  std::vector<std::int64_t> run_starts;
  for (std::int64_t k = 0; k < n; ++k) {
    if (k == 0 || is[order[static_cast<std::size_t>(k)]] != is[order[static_cast<std::size_t>(k - 1)]])
      run_starts.push_back(k);
  }
  run_starts.push_back(n);
  const auto runs = static_cast<std::int64_t>(run_starts.size()) - 1;
  visit_float(grad_table.dtype(), "embedding_scatter_add", [&](auto tag) {
    using T = decltype(tag);
    parallel_chunks(runs, 16, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t run = begin; run < end; ++run) {
        const auto first = run_starts[static_cast<std::size_t>(run)], last = run_starts[static_cast<std::size_t>(run + 1)];
        T* target = grad_table.data<T>() + is[order[static_cast<std::size_t>(first)]] * width;
        for (std::int64_t k = first; k < last; ++k) {
          const T* row = grad_rows.data<T>() + order[static_cast<std::size_t>(k)] * width;
          for (std::int64_t j = 0; j < width; ++j) target[j] += row[j];
        }
      }
    });
  });
}

}  // namespace pw::kernels::cpu
