// Bad inputs are refused with an error that names the op and the tensors.
#include <boost/test/unit_test.hpp>

#include "kernels/ops/activation.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/conv2d.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/linear.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/optimizer.h"
#include "kernels/ops/pool.h"
#include "tests/support/test_util.h"

namespace k = pw::kernels;
using k::DType;
using k::Tensor;

namespace {

// True when the message names every fragment.
auto message_has(std::vector<std::string> fragments) {
  return [fragments = std::move(fragments)](const pw::Error& e) {
    const std::string what = e.what();
    for (const auto& f : fragments) {
      if (what.find(f) == std::string::npos) {
        BOOST_TEST_MESSAGE("missing '" << f << "' in: " << what);
        return false;
      }
    }
    return true;
  };
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_bad_input)

BOOST_AUTO_TEST_CASE(shape_mismatches) {
  const Tensor x = Tensor::zeros({2, 3, 8, 8});
  BOOST_CHECK_EXCEPTION(k::conv2d_forward(x, Tensor::zeros({4, 5, 3, 3}), Tensor(), {}), pw::Error,
                        message_has({"conv2d", "channels"}));
  BOOST_CHECK_EXCEPTION(k::conv2d_forward(x, Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({5}), {}), pw::Error,
                        message_has({"conv2d_forward", "bias", "F32[5]"}));
  BOOST_CHECK_EXCEPTION(k::conv2d_forward(Tensor::zeros({3, 8, 8}), Tensor::zeros({4, 3, 3, 3}), Tensor(), {}),
                        pw::Error, message_has({"conv2d_forward", "x", "4-D", "F32[3, 8, 8]"}));
  BOOST_CHECK_EXCEPTION(k::linear_forward(Tensor::zeros({4, 6}), Tensor::zeros({3, 5}), Tensor()), pw::Error,
                        message_has({"linear_forward", "F32[4, 6]", "F32[3, 5]"}));
  BOOST_CHECK_EXCEPTION(k::add(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})), pw::Error,
                        message_has({"add", "F32[3, 2]"}));
  BOOST_CHECK_THROW(k::max_pool2d_backward(Tensor::zeros({2, 3, 3, 3}), Tensor::zeros({8}, DType::F32),
                                           {2, 3, 8, 8}, {}),
                    pw::Error);
  Tensor gamma = Tensor::zeros({4}), beta = Tensor::zeros({3}), rm = Tensor::zeros({3}), rv = Tensor::zeros({3});
  Tensor mean = Tensor::zeros({3}), invstd = Tensor::zeros({3});
  BOOST_CHECK_EXCEPTION(k::batch_norm_forward_train(x, gamma, beta, rm, rv, mean, invstd, {}), pw::Error,
                        message_has({"batch_norm_forward_train", "gamma", "F32[4]"}));
}

BOOST_AUTO_TEST_CASE(mixed_dtypes_and_devices) {
  BOOST_CHECK_EXCEPTION(k::add(Tensor::zeros({2}), Tensor::zeros({2}, DType::F64)), pw::Error,
                        message_has({"add", "dtype", "F64[2]"}));
  BOOST_CHECK_EXCEPTION(k::add(Tensor::zeros({2}), Tensor::zeros({2}, DType::F32, k::Device::cpu(1))), pw::Error,
                        message_has({"add", "one device", "cpu:1"}));
  BOOST_CHECK_EXCEPTION(k::relu_forward(Tensor::zeros({2}, DType::I64)), pw::Error, message_has({"relu_forward", "I64"}));
}

BOOST_AUTO_TEST_CASE(label_out_of_range) {
  const Tensor logits = Tensor::zeros({3, 4});
  BOOST_CHECK_EXCEPTION(
      k::softmax_cross_entropy_forward(logits, Tensor::from_vector(std::vector<std::int64_t>{0, 4, 1}, {3})), pw::Error,
      message_has({"label 4", "row 1", "[0, 4)"}));
  BOOST_CHECK_EXCEPTION(
      k::softmax_cross_entropy_forward(logits, Tensor::from_vector(std::vector<std::int64_t>{0, -1, 1}, {3})),
      pw::Error, message_has({"label -1"}));
  BOOST_CHECK_EXCEPTION(
      k::softmax_cross_entropy_forward(logits, Tensor::from_vector(std::vector<std::int64_t>{0, 1}, {2})), pw::Error,
      message_has({"labels", "I64[2]"}));
}

BOOST_AUTO_TEST_CASE(embedding_id_out_of_range) {
  const Tensor table = Tensor::zeros({5, 2});
  BOOST_CHECK_EXCEPTION(k::embedding_gather(table, Tensor::from_vector(std::vector<std::int64_t>{1, 5}, {2})),
                        pw::Error, message_has({"embedding_gather", "id 5", "[0, 5)"}));
  Tensor grad = Tensor::zeros({5, 2});
  BOOST_CHECK_EXCEPTION(k::embedding_scatter_add(grad, Tensor::from_vector(std::vector<std::int64_t>{-2}, {1}),
                                                 Tensor::zeros({1, 2})),
                        pw::Error, message_has({"embedding_scatter_add", "id -2"}));
}

BOOST_AUTO_TEST_CASE(optimizer_state_mismatch) {
  Tensor param = Tensor::zeros({4}), m = Tensor::zeros({4}), v = Tensor::zeros({3});
  BOOST_CHECK_EXCEPTION(k::adam_update(param, Tensor::zeros({4}), m, v, {}, 1), pw::Error,
                        message_has({"adam_update", "v", "F32[3]"}));
  Tensor buf;
  BOOST_CHECK_THROW(k::sgd_update(param, Tensor::zeros({4}), buf, {.momentum = 0.9}, 1), pw::Error);
  BOOST_CHECK_THROW(k::adam_update(param, Tensor::zeros({4}), m, m, {}, 0), pw::Error);
}

BOOST_AUTO_TEST_SUITE_END()
