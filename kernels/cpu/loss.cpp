// Softmax cross-entropy on the CPU: one task per block of rows, row losses summed in row order so
// the batch loss is bitwise repeatable.
#include <cmath>
#include <vector>

#include "kernels/cpu/float_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace pw::kernels::cpu {

namespace {

void check_labels(const char* op, const Tensor& labels, std::int64_t classes) {
  const std::int64_t* ls = labels.data<std::int64_t>();
  for (std::int64_t i = 0; i < labels.numel(); ++i) {
    PW_CHECK(ls[i] >= 0 && ls[i] < classes, "" << op << ": label " << ls[i] << " at row " << i
                                                << " is out of range [0, " << classes << ") for " << labels.describe());
  }
}

}  // namespace

CrossEntropyResult softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels) {
  const std::int64_t rows = logits.dim(0), classes = logits.dim(1);
  check_labels("softmax_cross_entropy_forward", labels, classes);
  return visit_float(logits.dtype(), "softmax_cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    Tensor probs = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
    std::vector<double> row_loss(static_cast<std::size_t>(rows));
    std::vector<std::uint8_t> row_correct(static_cast<std::size_t>(rows));
    const std::int64_t* ls = labels.data<std::int64_t>();
    parallel_chunks(rows, 1, [&](std::int64_t begin, std::int64_t end) {
      std::vector<double> e(static_cast<std::size_t>(classes));
      for (std::int64_t r = begin; r < end; ++r) {
        const T* z = logits.data<T>() + r * classes;
        T* pr = probs.data<T>() + r * classes;
        std::int64_t argmax = 0;
        for (std::int64_t j = 1; j < classes; ++j)
          if (z[j] > z[argmax]) argmax = j;
        const double zmax = z[argmax];
        double total = 0.0;
        for (std::int64_t j = 0; j < classes; ++j) total += (e[static_cast<std::size_t>(j)] = std::exp(z[j] - zmax));
        for (std::int64_t j = 0; j < classes; ++j) pr[j] = static_cast<T>(e[static_cast<std::size_t>(j)] / total);
        row_loss[static_cast<std::size_t>(r)] = std::log(total) - (static_cast<double>(z[ls[r]]) - zmax);
        row_correct[static_cast<std::size_t>(r)] = argmax == ls[r] ? 1 : 0;
      }
    });
    CrossEntropyResult result{0.0, probs, 0};
    for (std::int64_t r = 0; r < rows; ++r) {
      result.loss += row_loss[static_cast<std::size_t>(r)];
      result.correct += row_correct[static_cast<std::size_t>(r)];
    }
    result.loss /= static_cast<double>(rows);
    return result;
  });
}

Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale) {
  const std::int64_t rows = probs.dim(0), classes = probs.dim(1);
  check_labels("softmax_cross_entropy_backward", labels, classes);
  return visit_float(probs.dtype(), "softmax_cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    Tensor grad = Tensor::empty(probs.shape(), probs.dtype(), probs.device());
    const std::int64_t* ls = labels.data<std::int64_t>();
    const T s = static_cast<T>(scale);
    parallel_chunks(rows, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const T* pr = probs.data<T>() + r * classes;
        T* g = grad.data<T>() + r * classes;
        for (std::int64_t j = 0; j < classes; ++j) g[j] = (pr[j] - (j == ls[r] ? T(1) : T(0))) * s;
      }
    });
    return grad;
  });
}

}  // namespace pw::kernels::cpu
