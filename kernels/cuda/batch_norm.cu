// Spatial batch normalisation on CUDA through cuDNN's batch-norm API (CUDNN_BATCHNORM_SPATIAL).
// cuDNN matches the contract: running = (1 - momentum) * running + momentum * batch with the
// unbiased batch variance for running_var, and save_mean / save_invstd = 1 / sqrt(var + eps)
// (biased batch variance) for backward. [N, C] inputs are treated as [N, C, 1, 1].
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pw::kernels::cuda {
namespace {

// x's descriptor and the derived [1, C, 1, 1] descriptor for the per-channel tensors.
struct BnDescriptors {
  TensorDescriptor x;
  TensorDescriptor channel;
  std::int64_t channels = 0;

  explicit BnDescriptors(const Tensor& t) {
    PW_CHECK(t.ndim() == 4 || t.ndim() == 2, "batch_norm: x must be [N, C, H, W] or [N, C], got " << t.describe());
    const std::int64_t n = t.dim(0), c = t.dim(1);
    const std::int64_t h = t.ndim() == 4 ? t.dim(2) : 1;
    const std::int64_t w = t.ndim() == 4 ? t.dim(3) : 1;
    channels = c;
    if (t.numel() == 0) return;   // cuDNN rejects empty tensors; callers handle them without it
    x.set_nchw(n, c, h, w);
    PW_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(channel.get(), x.get(), CUDNN_BATCHNORM_SPATIAL));
  }
};

void require_channel_tensor(const Tensor& t, std::int64_t channels, const char* what) {
  detail::require_f32(t, what);
  PW_CHECK(t.numel() == channels, "" << what << " must have " << channels << " values, got " << t.describe());
}

}  // namespace

Tensor batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                Tensor& running_var, Tensor& save_mean, Tensor& save_invstd,
                                const BatchNormParams& p) {
  detail::require_f32(x, "batch_norm_forward_train: x");
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  BnDescriptors d(x);
  require_channel_tensor(gamma, d.channels, "batch_norm_forward_train: gamma");
  require_channel_tensor(beta, d.channels, "batch_norm_forward_train: beta");
  require_channel_tensor(running_mean, d.channels, "batch_norm_forward_train: running_mean");
  require_channel_tensor(running_var, d.channels, "batch_norm_forward_train: running_var");
  require_channel_tensor(save_mean, d.channels, "batch_norm_forward_train: save_mean");
  require_channel_tensor(save_invstd, d.channels, "batch_norm_forward_train: save_invstd");
  PW_CHECK(x.numel() / std::max<std::int64_t>(d.channels, 1) > 1,
           "batch_norm_forward_train: needs more than one value per channel, got " << x.describe());
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev);
  const float one = 1.0f, zero = 0.0f;
  PW_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cudnn_handle(dev), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x.get(), x.raw(), d.x.get(), y.raw(),
      d.channel.get(), gamma.raw(), beta.raw(), p.momentum, running_mean.raw(), running_var.raw(), p.eps,
      save_mean.raw(), save_invstd.raw()));
  return y;
}

Tensor batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, const BatchNormParams& p) {
  detail::require_f32(x, "batch_norm_forward_eval: x");
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  BnDescriptors d(x);
  require_channel_tensor(gamma, d.channels, "batch_norm_forward_eval: gamma");
  require_channel_tensor(beta, d.channels, "batch_norm_forward_eval: beta");
  require_channel_tensor(running_mean, d.channels, "batch_norm_forward_eval: running_mean");
  require_channel_tensor(running_var, d.channels, "batch_norm_forward_eval: running_var");
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev);
  if (x.numel() == 0) return y;
  const float one = 1.0f, zero = 0.0f;
  PW_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      cudnn_handle(dev), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x.get(), x.raw(), d.x.get(), y.raw(),
      d.channel.get(), gamma.raw(), beta.raw(), running_mean.raw(), running_var.raw(), p.eps));
  return y;
}

BatchNormGrads batch_norm_backward(const Tensor& x, const Tensor& grad_y, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd, const BatchNormParams& p) {
  detail::require_f32(x, "batch_norm_backward: x");
  detail::require_f32(grad_y, "batch_norm_backward: grad_y");
  PW_CHECK(x.shape() == grad_y.shape(), "batch_norm_backward: x " << x.describe() << " vs grad_y "
                                                                  << grad_y.describe());
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  BnDescriptors d(x);
  require_channel_tensor(gamma, d.channels, "batch_norm_backward: gamma");
  require_channel_tensor(save_mean, d.channels, "batch_norm_backward: save_mean");
  require_channel_tensor(save_invstd, d.channels, "batch_norm_backward: save_invstd");
  BatchNormGrads g{Tensor::empty(x.shape(), DType::F32, dev), Tensor::empty({d.channels}, DType::F32, dev),
                   Tensor::empty({d.channels}, DType::F32, dev)};
  if (x.numel() == 0) {   // an empty batch: no gradient anywhere
    g.grad_x.zero_();
    g.grad_gamma.zero_();
    g.grad_beta.zero_();
    return g;
  }
  const float one = 1.0f, zero = 0.0f;
  // Data and parameter gradients are written, not accumulated (beta = 0 for both).
  PW_CUDNN_CHECK(cudnnBatchNormalizationBackward(cudnn_handle(dev), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero,
                                                 d.x.get(), x.raw(), d.x.get(), grad_y.raw(), d.x.get(),
                                                 g.grad_x.raw(), d.channel.get(), gamma.raw(), g.grad_gamma.raw(),
                                                 g.grad_beta.raw(), p.eps, save_mean.raw(), save_invstd.raw()));
  return g;
}

}  // namespace pw::kernels::cuda
