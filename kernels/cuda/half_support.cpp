// Which op families the CUDA backend runs natively on BF16 and F16 (kernels/cuda/ops.h).
#include "kernels/cuda/ops.h"

namespace pw::kernels::cuda {

bool native_half(DType dtype, HalfOp op) {
  if (dtype != DType::BF16 && dtype != DType::F16) return false;
  switch (op) {
    case HalfOp::Conv:          // conv2d.cu: cuDNN PSEUDO_BFLOAT16 / PSEUDO_HALF on tensor cores
    case HalfOp::Matmul:        // linear.cu: cublasGemmEx, F32 accumulation
    case HalfOp::Elementwise:   // elementwise.cu, activation.cu, dropout.cu
    case HalfOp::Pool:          // pool.cu: max, average and adaptive average, computed in float
    case HalfOp::AdaptivePool:
    case HalfOp::BatchNormTrain:   // batch_norm.cu: own kernels, statistics in double
    case HalfOp::BatchNormEval:
      return true;
  }
  return false;
}

}  // namespace pw::kernels::cuda
