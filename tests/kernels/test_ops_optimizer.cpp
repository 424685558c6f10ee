// Optimizer updates against values worked out by hand from torch.optim's formulas.
#include <cmath>

#include <boost/test/unit_test.hpp>

#include "kernels/ops/optimizer.h"
#include "tests/support/test_util.h"

namespace k = pw::kernels;
using k::DType;
using k::Tensor;

namespace {

Tensor scalar(double v, DType dtype) { return Tensor::full({1}, v, dtype); }

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_optimizer)

// lr 0.1, momentum 0.9, weight decay 0.01, param 1, grad 0.5 every step:
//   step 1: d = 0.5 + 0.01*1       = 0.51;        buf = 0.51 (first step);              p = 0.949
//   step 2: d = 0.5 + 0.01*0.949   = 0.50949;     buf = 0.9*0.51 + 0.50949 = 0.96849;   p = 0.852151
//   step 3: d = 0.5 + 0.00852151   = 0.50852151;  buf = 0.9*0.96849 + d = 1.38016251;   p = 0.714134749
BOOST_AUTO_TEST_CASE(sgd_momentum_weight_decay_three_steps) {
  for (const DType dtype : {DType::F64, DType::F32}) {
    Tensor param = scalar(1.0, dtype), grad = scalar(0.5, dtype), buf = scalar(123.0, dtype);   // buf overwritten at step 1
    const k::SgdParams p{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
    const double tol = dtype == DType::F64 ? 1e-12 : 1e-5;
    const double expected_param[] = {0.949, 0.852151, 0.714134749};
    const double expected_buf[] = {0.51, 0.96849, 1.38016251};
    for (int step = 1; step <= 3; ++step) {
      k::sgd_update(param, grad, buf, p, step);
      BOOST_CHECK_CLOSE(param.item(), expected_param[step - 1], tol * 100);
      BOOST_CHECK_CLOSE(buf.item(), expected_buf[step - 1], tol * 100);
    }
  }
}

BOOST_AUTO_TEST_CASE(sgd_without_momentum_ignores_buffer) {
  Tensor param = scalar(2.0, DType::F64), grad = scalar(-1.0, DType::F64);
  Tensor no_buffer;
  k::sgd_update(param, grad, no_buffer, {.lr = 0.5}, 1);
  BOOST_CHECK_CLOSE(param.item(), 2.5, 1e-12);
}

// lr 0.1, betas (0.9, 0.999), eps 1e-8, param 1, grads 0.5 then -0.25 then 1.0:
//   step 1: m = 0.05, v = 0.00025; m_hat = 0.5, v_hat = 0.25; p = 1 - 0.1*0.5/(0.5+1e-8)
//   step 2: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225
//           m_hat = 0.02/0.19, v_hat = 0.00031225/0.001999
//   step 3: m = 0.018 + 0.1 = 0.118, v = 0.00031193775 + 0.001 = 0.00131193775
//           m_hat = 0.118/0.271, v_hat = 0.00131193775/0.002997001
BOOST_AUTO_TEST_CASE(adam_three_steps) {
  const double grads[] = {0.5, -0.25, 1.0};
  const double m_hat[] = {0.5, 0.02 / 0.19, 0.118 / 0.271};
  const double v_hat[] = {0.25, 0.00031225 / 0.001999, 0.00131193775 / 0.002997001};
  for (const DType dtype : {DType::F64, DType::F32}) {
    Tensor param = scalar(1.0, dtype), m = scalar(0.0, dtype), v = scalar(0.0, dtype);
    const k::AdamParams p{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    double expected = 1.0;
    const double tol_percent = dtype == DType::F64 ? 1e-9 : 1e-4;
    for (int step = 1; step <= 3; ++step) {
      k::adam_update(param, scalar(grads[step - 1], dtype), m, v, p, step);
      expected -= 0.1 * m_hat[step - 1] / (std::sqrt(v_hat[step - 1]) + 1e-8);
      BOOST_CHECK_CLOSE(param.item(), expected, tol_percent);
    }
    BOOST_CHECK_CLOSE(m.item(), 0.118, tol_percent);
    BOOST_CHECK_CLOSE(v.item(), 0.00131193775, tol_percent);
  }
}

BOOST_AUTO_TEST_CASE(adam_weight_decay_adds_to_gradient) {
  // param 2, grad 0, wd 0.5: the effective gradient is 1, so step 1 moves by lr * 1/(1 + eps).
  Tensor param = scalar(2.0, DType::F64), m = scalar(0.0, DType::F64), v = scalar(0.0, DType::F64);
  k::adam_update(param, scalar(0.0, DType::F64), m, v, {.lr = 0.01, .eps = 1e-8, .weight_decay = 0.5}, 1);
  BOOST_CHECK_CLOSE(param.item(), 2.0 - 0.01 / (1.0 + 1e-8), 1e-10);
}

// lr 0.1, eps 1e-10, param 1, grad 0.5 every step: sum_sq = 0.25, 0.5, 0.75;
//   p = 1 - 0.05/0.5 = 0.9;  0.9 - 0.05/sqrt(0.5) = 0.829289321881;  - 0.05/sqrt(0.75) = 0.771554294989
BOOST_AUTO_TEST_CASE(adagrad_three_steps) {
  for (const DType dtype : {DType::F64, DType::F32}) {
    Tensor param = scalar(1.0, dtype), sum_sq = scalar(0.0, dtype);
    const double expected[] = {0.9, 0.829289321881, 0.771554294989};
    const double tol_percent = dtype == DType::F64 ? 1e-7 : 1e-4;   // eps = 1e-10 moves the 11th digit
    for (int step = 1; step <= 3; ++step) {
      k::adagrad_update(param, scalar(0.5, dtype), sum_sq, {.lr = 0.1, .eps = 1e-10});
      BOOST_CHECK_CLOSE(param.item(), expected[step - 1], tol_percent);
    }
    BOOST_CHECK_CLOSE(sum_sq.item(), 0.75, tol_percent);
  }
}

BOOST_AUTO_TEST_SUITE_END()
