// Stage threads call ops at the same time (shared primitive caches, per-thread oneDNN streams,
// several logical CPU devices): every thread must get the single-threaded answer, bit for bit.
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kernels/ops/batch_norm.h"
#include "kernels/ops/conv2d.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/linear.h"
#include "kernels/ops/pool.h"
#include "tests/support/test_util.h"

namespace k = pw::kernels;
using k::Tensor;

namespace {

// A small forward/backward chain touching each oneDNN primitive family, on `device`.
std::vector<double> run_chain(k::Device device) {
  const Tensor x = pw::test::random_tensor({4, 3, 12, 12}, 1, -1, 1, k::DType::F32, device);
  const Tensor w = pw::test::random_tensor({8, 3, 3, 3}, 2, -1, 1, k::DType::F32, device);
  const k::Conv2dParams cp{.stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  const Tensor y = k::conv2d_forward(x, w, Tensor(), cp);
  Tensor gamma = Tensor::full({8}, 1.0, k::DType::F32, device), beta = Tensor::zeros({8}, k::DType::F32, device);
  Tensor rm = Tensor::zeros({8}, k::DType::F32, device), rv = Tensor::full({8}, 1.0, k::DType::F32, device);
  Tensor mean = Tensor::empty({8}, k::DType::F32, device), invstd = Tensor::empty({8}, k::DType::F32, device);
  const Tensor z = k::batch_norm_forward_train(y, gamma, beta, rm, rv, mean, invstd, {});
  const k::MaxPoolResult pooled = k::max_pool2d_forward(z, {});
  const Tensor flat = pooled.y.reshape({4, 8 * 6 * 6});
  const Tensor fc = pw::test::random_tensor({10, 8 * 6 * 6}, 3, -0.1, 0.1, k::DType::F32, device);
  const Tensor out = k::linear_forward(flat, fc, Tensor());
  const Tensor grad_flat = k::linear_backward_data(out, fc);
  const Tensor grad_z = k::max_pool2d_backward(grad_flat.reshape(pooled.y.shape()), pooled.workspace, z.shape(), {});
  const k::BatchNormGrads bn = k::batch_norm_backward(y, grad_z, gamma, mean, invstd, {});
  Tensor grad_w = Tensor::zeros(w.shape(), k::DType::F32, device), no_bias;
  k::conv2d_backward_filter(x, bn.grad_x, grad_w, no_bias, cp);
  return {k::sum(out), k::sum_of_squares(bn.grad_x), k::sum_of_squares(grad_w), k::sum(rv)};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_concurrency)

BOOST_AUTO_TEST_CASE(threads_on_two_cpu_devices_match_a_single_thread) {
  const std::vector<double> expected = run_chain(k::Device::cpu(0));
  constexpr int kThreads = 4;
  std::vector<std::vector<double>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&results, t] {
      for (int repeat = 0; repeat < 3; ++repeat) results[t] = run_chain(k::Device::cpu(t % 2));
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) BOOST_CHECK(results[t] == expected);
}

BOOST_AUTO_TEST_SUITE_END()
