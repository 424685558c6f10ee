// Our F32 CPU ops against PyTorch 1.13 on the inputs in tests/golden/ops_golden.safetensors
// (made by tests/golden/make_golden.py).
#include <boost/test/unit_test.hpp>

#include "kernels/ops/activation.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/conv2d.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/linear.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/optimizer.h"
#include "kernels/ops/pool.h"
#include "kernels/safetensors.h"
#include "tests/support/test_util.h"

namespace k = pw::kernels;
using k::DType;
using k::Tensor;

namespace {

struct Golden {
  k::NamedTensors tensors = k::load_safetensors(pw::test::source_dir() + "/tests/golden/ops_golden.safetensors");

  Tensor operator[](const std::string& name) const {
    const auto it = tensors.find(name);
    BOOST_REQUIRE_MESSAGE(it != tensors.end(), "golden file has no tensor " << name);
    return it->second.clone();   // ops may update their arguments in place
  }
};

const Golden& golden() {
  static const Golden g;
  return g;
}

void check(const Tensor& ours, const std::string& name) {
  pw::test::check_close(ours, golden()[name], 1e-4, 1e-5, name);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_golden)

BOOST_AUTO_TEST_CASE(conv2d) {
  const k::Conv2dParams p{.stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 2};
  const Golden& g = golden();
  const Tensor x = g["conv.x"], w = g["conv.w"], b = g["conv.b"], r = g["conv.r"];
  check(k::conv2d_forward(x, w, b, p), "conv.y");
  check(k::conv2d_backward_data(r, w, x.shape(), p), "conv.grad_x");
  Tensor grad_w = Tensor::zeros(w.shape()), grad_b = Tensor::zeros(b.shape());
  k::conv2d_backward_filter(x, r, grad_w, grad_b, p);
  check(grad_w, "conv.grad_w");
  check(grad_b, "conv.grad_b");
}

BOOST_AUTO_TEST_CASE(batch_norm) {
  const Golden& g = golden();
  const Tensor x = g["bn.x"], gamma = g["bn.gamma"], beta = g["bn.beta"], r = g["bn.r"];
  Tensor running_mean = g["bn.running_mean_in"], running_var = g["bn.running_var_in"];
  Tensor save_mean = Tensor::empty({3}), save_invstd = Tensor::empty({3});
  const k::BatchNormParams p{.momentum = 0.1, .eps = 1e-5};
  check(k::batch_norm_forward_train(x, gamma, beta, running_mean, running_var, save_mean, save_invstd, p), "bn.y");
  check(running_mean, "bn.running_mean_out");
  check(running_var, "bn.running_var_out");
  const k::BatchNormGrads grads = k::batch_norm_backward(x, r, gamma, save_mean, save_invstd, p);
  check(grads.grad_x, "bn.grad_x");
  check(grads.grad_gamma, "bn.grad_gamma");
  check(grads.grad_beta, "bn.grad_beta");
  check(k::batch_norm_forward_eval(x, gamma, beta, running_mean, running_var, p), "bn.y_eval");
}

BOOST_AUTO_TEST_CASE(max_pool) {
  const k::Pool2dParams p{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  const Tensor x = golden()["maxpool.x"];
  const k::MaxPoolResult fwd = k::max_pool2d_forward(x, p);
  check(fwd.y, "maxpool.y");
  check(k::max_pool2d_backward(golden()["maxpool.r"], fwd.workspace, x.shape(), p), "maxpool.grad_x");
}

BOOST_AUTO_TEST_CASE(avg_pool) {
  const k::Pool2dParams p{.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  const Tensor x = golden()["avgpool.x"];
  check(k::avg_pool2d_forward(x, p), "avgpool.y");
  check(k::avg_pool2d_backward(golden()["avgpool.r"], x.shape(), p), "avgpool.grad_x");
}

BOOST_AUTO_TEST_CASE(adaptive_avg_pool) {
  const Tensor x = golden()["adaptive.x"];
  check(k::adaptive_avg_pool2d_forward(x, 3, 2), "adaptive.y");
  check(k::adaptive_avg_pool2d_backward(golden()["adaptive.r"], x.shape()), "adaptive.grad_x");
}

BOOST_AUTO_TEST_CASE(linear) {
  const Golden& g = golden();
  const Tensor x = g["linear.x"], w = g["linear.w"], b = g["linear.b"], r = g["linear.r"];
  check(k::linear_forward(x, w, b), "linear.y");
  check(k::linear_backward_data(r, w), "linear.grad_x");
  Tensor grad_w = Tensor::zeros(w.shape()), grad_b = Tensor::zeros(b.shape());
  k::linear_backward_weight(x, r, grad_w, grad_b);
  check(grad_w, "linear.grad_w");
  check(grad_b, "linear.grad_b");
}

BOOST_AUTO_TEST_CASE(relu) {
  const Tensor y = k::relu_forward(golden()["relu.x"]);
  check(y, "relu.y");
  check(k::relu_backward(y, golden()["relu.r"]), "relu.grad_x");
}

BOOST_AUTO_TEST_CASE(cross_entropy) {
  const Tensor logits = golden()["ce.logits"], labels = golden()["ce.labels"];
  const k::CrossEntropyResult fwd = k::softmax_cross_entropy_forward(logits, labels);
  check(Tensor::full({1}, fwd.loss), "ce.loss");
  check(k::softmax_cross_entropy_backward(fwd.probs, labels, 1.0 / static_cast<double>(logits.dim(0))),
        "ce.grad_logits");
}

BOOST_AUTO_TEST_CASE(embedding) {
  const Tensor table = golden()["embedding.table"], ids = golden()["embedding.ids"];
  check(k::embedding_gather(table, ids), "embedding.y");
  Tensor grad_table = Tensor::zeros(table.shape());
  k::embedding_scatter_add(grad_table, ids, golden()["embedding.r"]);
  check(grad_table, "embedding.grad_table");
}

BOOST_AUTO_TEST_CASE(optimizers_two_steps) {
  const Golden& g = golden();
  const Tensor grads[] = {g["optim.g1"], g["optim.g2"]};
  Tensor sgd = g["optim.param"], buf = Tensor::zeros(sgd.shape());
  Tensor adam = g["optim.param"], m = Tensor::zeros(adam.shape()), v = Tensor::zeros(adam.shape());
  Tensor ada = g["optim.param"], sum_sq = Tensor::zeros(ada.shape());
  for (int step = 1; step <= 2; ++step) {
    const Tensor& grad = grads[step - 1];
    k::sgd_update(sgd, grad, buf, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}, step);
    k::adam_update(adam, grad, m, v, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01}, step);
    k::adagrad_update(ada, grad, sum_sq, {.lr = 0.05, .eps = 1e-10, .weight_decay = 0.01});
    const std::string suffix = ".step" + std::to_string(step);
    check(sgd, "optim.sgd" + suffix);
    check(adam, "optim.adam" + suffix);
    check(ada, "optim.adagrad" + suffix);
  }
}

BOOST_AUTO_TEST_SUITE_END()
