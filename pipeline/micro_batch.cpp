#include "pipeline/micro_batch.h"

#include <cstring>

#include "core/error.h"

namespace pw::pipeline {

std::vector<kernels::Tensor> split_batch(const kernels::Tensor& t, int count) {
  PW_CHECK(t.device().is_cpu(), "split_batch expects a CPU tensor, got " << t.describe());
  PW_INPUT_CHECK(count >= 1, count << " micro-batches; expected 1 or more");
  const std::int64_t batch = t.dim(0);
  PW_INPUT_CHECK(batch % count == 0, "a batch of " << batch << " does not split into " << count
                                                     << " equal micro-batches; use a batch size divisible by "
                                                     << count);
  const std::int64_t rows = batch / count;
  kernels::Shape shape = t.shape();
  shape[0] = rows;
  const std::int64_t elements = t.numel() / count;
  std::vector<kernels::Tensor> out;
  for (int i = 0; i < count; ++i) out.push_back(t.view(elements * i, shape));
  return out;
}

}  // namespace pw::pipeline
