// NcclComm and NcclTransport. The first suite needs no GPU: the NCCL transport refuses CPU ranks and
// missing GPUs with a one-line InputError. The GPU suite runs after it passed; without a device it
// prints "skipped: no CUDA device" and the executable exits 77 (ctest: Skipped). Its two-GPU cases
// (1F1B-like exchange, tag mismatch, timeout on an open link) are reported skipped on one GPU.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "rpc/nccl_transport.h"
#include "rpc/store.h"
#include "tests/support/test_util.h"
#ifdef PW_WITH_CUDA
#include "kernels/cuda_check.h"
#include "kernels/cuda_probe.h"
#include "kernels/ops/elementwise.h"
#include "rpc/nccl_comm.h"
#endif

namespace utf = boost::unit_test;

namespace pw {
namespace {

using kernels::Device;
using kernels::DType;
using kernels::Tensor;
using rpc::PayloadKind;
using rpc::Tag;
using namespace std::chrono_literals;

// The message of the E that fn throws ("(no exception)" if none; other exceptions propagate).
template <typename E, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception)";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

#ifdef PW_WITH_CUDA
rpc::Deadline in_ms(int ms) { return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms); }

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu());
  const Tensor hb = b.to(Device::cpu());
  return ha.shape() == hb.shape() && ha.dtype() == hb.dtype() &&
         (ha.nbytes() == 0 || std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0);
}
#endif

}  // namespace

BOOST_AUTO_TEST_SUITE(nccl_everywhere)

BOOST_AUTO_TEST_CASE(cpu_device_gives_input_error) {
  rpc::InMemoryStore store;
  const std::string msg =
      error_of<InputError>([&] { rpc::make_nccl_transport(0, 2, Device::cpu(0), store, "job"); });
  BOOST_CHECK_MESSAGE(contains(msg, "the thrift transport"), msg);
#ifdef PW_WITH_CUDA
  BOOST_CHECK_MESSAGE(contains(msg, "needs a CUDA device") && contains(msg, "cpu:0"), msg);
#else
  BOOST_CHECK_EQUAL(msg, "this build has no CUDA/NCCL; use the thrift transport");
#endif
}

BOOST_AUTO_TEST_CASE(missing_gpu_and_bad_rank_give_input_errors) {
  rpc::InMemoryStore store;
  const Device absent = Device::cuda(kernels::cuda_device_count());
  const std::string msg = error_of<InputError>([&] { rpc::make_nccl_transport(0, 2, absent, store, "job"); });
  BOOST_CHECK_MESSAGE(contains(msg, "the thrift transport"), msg);
  const std::string rank = error_of<InputError>([&] { rpc::make_nccl_transport(2, 2, absent, store, "job"); });
#ifdef PW_WITH_CUDA
  BOOST_CHECK_MESSAGE(contains(msg, absent.str()), msg);
  BOOST_CHECK_MESSAGE(contains(rank, "rank 2 is outside a world of 2"), rank);
#else
  BOOST_CHECK_MESSAGE(contains(rank, "no CUDA/NCCL"), rank);
#endif
}

BOOST_AUTO_TEST_SUITE_END()

// Runs only after the suite above passed, so a failure there is never hidden behind the skip.
BOOST_AUTO_TEST_SUITE(nccl_gpu, *utf::depends_on("nccl_everywhere") * utf::fixture<test::RequireCudaOrSkip>())

BOOST_AUTO_TEST_CASE(transport_on_a_gpu_reports_rank_and_world) {
  rpc::InMemoryStore store;
  const auto transport = rpc::make_nccl_transport(1, 2, Device::cuda(0), store, "ranks");
  BOOST_TEST(transport->rank() == 1);
  BOOST_TEST(transport->world_size() == 2);
}

#ifdef PW_WITH_CUDA

BOOST_AUTO_TEST_CASE(one_rank_comm_grouped_self_send_recv_is_bit_exact) {
  const Device dev = Device::cuda(0);
  rpc::InMemoryStore store;
  const rpc::Deadline deadline = in_ms(60000);
  rpc::NcclComm comm(rpc::nccl_unique_id_for(store, "self/nccl/0-0", true, deadline), 0, 1, dev, "self", deadline);
  BOOST_TEST(comm.size() == 1);
  for (const DType dtype : {DType::F32, DType::F64}) {
    const Tensor x = test::random_tensor({37, 5}, 11, -1.0, 1.0, dtype, dev);
    const Tensor y = Tensor::zeros(x.shape(), dtype, dev);
    kernels::CudaDeviceGuard guard(dev.index);
    kernels::Stream stream(dev);
    kernels::Event ready(dev);
    ready.record(kernels::current_stream(dev));
    ready.wait_on(stream);
    const auto s = static_cast<cudaStream_t>(stream.native());
    PW_NCCL_CHECK(ncclGroupStart());
    PW_NCCL_CHECK(ncclSend(x.raw(), x.nbytes(), ncclUint8, 0, comm.native(), s));
    PW_NCCL_CHECK(ncclRecv(y.raw(), y.nbytes(), ncclUint8, 0, comm.native(), s));
    comm.check_enqueued(ncclGroupEnd(), "self send/recv", deadline);
    kernels::Event done(dev);
    done.record(stream);
    comm.wait_for(done, "self send/recv", deadline);
    BOOST_TEST(same_bits(x, y));
  }
  {
    // A transfer long enough that the wait polls an event that is not done yet, then at once a
    // checked kernel launch: a "not ready" left behind as the last CUDA error would fail it.
    const std::int64_t n = std::int64_t{1} << 25;
    const Tensor x = Tensor::full({n}, 1.5, DType::F32, dev);
    Tensor y = Tensor::zeros({n}, DType::F32, dev);
    kernels::CudaDeviceGuard guard(dev.index);
    auto& stream = kernels::current_stream(dev);
    const auto s = static_cast<cudaStream_t>(stream.native());
    PW_NCCL_CHECK(ncclGroupStart());
    PW_NCCL_CHECK(ncclSend(x.raw(), x.nbytes(), ncclUint8, 0, comm.native(), s));
    PW_NCCL_CHECK(ncclRecv(y.raw(), y.nbytes(), ncclUint8, 0, comm.native(), s));
    comm.check_enqueued(ncclGroupEnd(), "large self send/recv", deadline);
    kernels::Event done(dev);
    done.record(stream);
    comm.wait_for(done, "large self send/recv", deadline);
    BOOST_CHECK_NO_THROW(kernels::scale_inplace(y, 2.0));
    BOOST_CHECK_CLOSE_FRACTION(kernels::sum(y), 3.0 * static_cast<double>(n), 1e-6);
  }
  if (kernels::cuda_device_count() < 2)
    BOOST_TEST_MESSAGE("skipped: the two-GPU NCCL cases (exchange, tag mismatch, open-link timeout) need 2 CUDA "
                       "devices; this machine has 1");
}

BOOST_AUTO_TEST_CASE(unique_id_travels_through_the_store) {
  rpc::InMemoryStore store;
  auto member =
      std::async(std::launch::async, [&] { return rpc::nccl_unique_id_for(store, "ids/a", false, in_ms(30000)); });
  std::this_thread::sleep_for(50ms);   // the member is already waiting when the root publishes
  const std::string id = rpc::nccl_unique_id_for(store, "ids/a", true, in_ms(30000));
  BOOST_TEST(id.size() == sizeof(ncclUniqueId));
  BOOST_TEST(member.get() == id);
  BOOST_TEST(store.get("ids/a", in_ms(0)) == id);

  const std::string late =
      error_of<rpc::TimeoutError>([&] { rpc::nccl_unique_id_for(store, "ids/missing", false, in_ms(100)); });
  BOOST_CHECK_MESSAGE(contains(late, "ids/missing"), late);
  rpc::AbortFlag flag;
  flag.raise("stage 3 failed");
  const std::string aborted = error_of<rpc::AbortedError>(
      [&] { rpc::nccl_unique_id_for(store, "ids/missing", false, in_ms(30000), &flag); });
  BOOST_CHECK_MESSAGE(contains(aborted, "stage 3 failed"), aborted);
}

BOOST_AUTO_TEST_CASE(recv_from_a_silent_peer_times_out_naming_it) {
  rpc::InMemoryStore store;
  rpc::NcclTransport transport(1, 2, Device::cuda(0), store, "lonely");
  const Tag tag{7, 3, PayloadKind::Activation, 1};
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = error_of<rpc::TimeoutError>([&] { transport.recv(0, tag, in_ms(200)); });
  BOOST_CHECK_MESSAGE(contains(msg, "rank 1 receiving " + rpc::tag_str(tag) + " from rank 0"), msg);
  BOOST_TEST((std::chrono::steady_clock::now() - start < 10s));
  const std::string again = error_of<Error>([&] { transport.recv(0, tag, in_ms(200)); });
  BOOST_CHECK_MESSAGE(contains(again, "unusable after an earlier error"), again);
  const std::string self = error_of<Error>([&] { transport.send(1, tag, Tensor::zeros({1}), in_ms(200)); });
  BOOST_CHECK_MESSAGE(contains(self, "no links to oneself"), self);
}

BOOST_AUTO_TEST_CASE(abort_wakes_a_waiting_recv_and_refuses_later_calls) {
  rpc::InMemoryStore store;
  rpc::NcclTransport transport(1, 2, Device::cuda(0), store, "aborting");
  const Tag tag{0, 0, PayloadKind::Gradient, 1};
  const auto start = std::chrono::steady_clock::now();
  auto waiting = std::async(std::launch::async, [&] {
    return error_of<rpc::AbortedError>([&] { transport.recv(0, tag, in_ms(60000)); });
  });
  std::this_thread::sleep_for(100ms);
  transport.abort("stage 0 crashed");
  const std::string msg = waiting.get();
  BOOST_CHECK_MESSAGE(contains(msg, "stage 0 crashed") && contains(msg, "from rank 0"), msg);
  BOOST_TEST((std::chrono::steady_clock::now() - start < 30s));
  const std::string later = error_of<rpc::AbortedError>(
      [&] { transport.send(0, tag, Tensor::zeros({2}, DType::F32, Device::cuda(0)), in_ms(1000)); });
  BOOST_CHECK_MESSAGE(contains(later, "stage 0 crashed"), later);
}

namespace {

struct TwoGpus {
  boost::test_tools::assertion_result operator()(utf::test_unit_id) const {
    const int count = kernels::cuda_device_count();
    boost::test_tools::assertion_result result(count >= 2);
    result.message() << "the two-GPU NCCL cases need 2 CUDA devices; this machine has " << count;
    return result;
  }
};

// Rank 0 on cuda:0 and rank 1 on cuda:1, each in its own thread with its own transport, built and
// destroyed there as in a real job. Rethrows a rank's failure.
template <typename Rank0, typename Rank1>
void run_pair(const std::string& job, Rank0&& rank0, Rank1&& rank1) {
  rpc::InMemoryStore store;
  auto f0 = std::async(std::launch::async, [&] {
    rpc::NcclTransport transport(0, 2, Device::cuda(0), store, job);
    rank0(transport);
  });
  auto f1 = std::async(std::launch::async, [&] {
    rpc::NcclTransport transport(1, 2, Device::cuda(1), store, job);
    rank1(transport);
  });
  f0.get();
  f1.get();
}

Tag activation_tag(int mb) { return Tag{1, mb, PayloadKind::Activation, 1}; }
Tag gradient_tag(int mb) { return Tag{1, mb, PayloadKind::Gradient, 0}; }
Tensor activation(int mb, Device d) { return test::random_tensor({2 + mb, 3, 5}, 100 + mb, -1, 1, DType::F32, d); }
Tensor gradient(int mb, Device d) { return test::random_tensor({2 + mb, 7}, 200 + mb, -1, 1, DType::F64, d); }

}  // namespace

BOOST_AUTO_TEST_SUITE(two_gpus, *utf::precondition(TwoGpus()))

BOOST_AUTO_TEST_CASE(one_f_one_b_exchange_both_directions) {
  constexpr int kMicroBatches = 6;
  const std::vector<std::int64_t> ids = {3, -1, 1 << 30};
  std::vector<Tensor> activations(kMicroBatches), gradients(kMicroBatches);
  Tensor control, empty;
  run_pair(
      "1f1b",
      [&](rpc::NcclTransport& t) {   // stage 0: forward warm-up of one, then one forward, one backward
        for (int mb = 0; mb < kMicroBatches; ++mb) {
          t.send(1, activation_tag(mb), activation(mb, Device::cuda(0)), in_ms(60000));
          if (mb >= 1) gradients[mb - 1] = t.recv(1, gradient_tag(mb - 1), in_ms(60000)).to(Device::cpu());
        }
        gradients[kMicroBatches - 1] = t.recv(1, gradient_tag(kMicroBatches - 1), in_ms(60000)).to(Device::cpu());
        // A host tensor is copied to the device first; an empty one carries only its header.
        t.send(1, Tag{1, 0, PayloadKind::Control, 0}, Tensor::from_vector(ids, {3}), in_ms(60000));
        t.send(1, Tag{1, 1, PayloadKind::Control, 0}, Tensor::empty({0, 4}, DType::F32, Device::cuda(0)),
               in_ms(60000));
      },
      [&](rpc::NcclTransport& t) {   // stage 1: receive each activation, answer with its gradient
        for (int mb = 0; mb < kMicroBatches; ++mb) {
          const Tensor got = t.recv(0, activation_tag(mb), in_ms(60000));
          PW_CHECK(got.device() == Device::cuda(1), "received on " << got.device().str());
          activations[mb] = got.to(Device::cpu());
          t.send(0, gradient_tag(mb), gradient(mb, Device::cuda(1)), in_ms(60000));
        }
        control = t.recv(0, Tag{1, 0, PayloadKind::Control, 0}, in_ms(60000)).to(Device::cpu());
        empty = t.recv(0, Tag{1, 1, PayloadKind::Control, 0}, in_ms(60000)).to(Device::cpu());
      });
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    BOOST_CHECK_MESSAGE(same_bits(activations[mb], activation(mb, Device::cpu())), "activation " << mb);
    BOOST_CHECK_MESSAGE(same_bits(gradients[mb], gradient(mb, Device::cpu())), "gradient " << mb);
  }
  BOOST_TEST(control.to_int_vector() == ids);
  BOOST_TEST((empty.shape() == kernels::Shape{0, 4}));
}

BOOST_AUTO_TEST_CASE(tag_order_mismatch_is_a_clear_error_and_the_link_stays_usable) {
  const Tag first = activation_tag(0);
  const Tag second = activation_tag(1);
  std::string mismatch;
  Tensor got;
  run_pair(
      "mismatch",
      [&](rpc::NcclTransport& t) {
        t.connect(1, in_ms(60000));
        t.send(1, first, activation(0, Device::cuda(0)), in_ms(60000));
        t.send(1, second, activation(1, Device::cuda(0)), in_ms(60000));
      },
      [&](rpc::NcclTransport& t) {
        t.connect(0, in_ms(60000));
        mismatch = error_of<Error>([&] { t.recv(0, second, in_ms(60000)); });
        got = t.recv(0, second, in_ms(60000)).to(Device::cpu());   // the unexpected message was dropped
      });
  BOOST_CHECK_MESSAGE(contains(mismatch, "rank 1 expected " + rpc::tag_str(second) + " from rank 0 but the next "
                                         "message on the link is " + rpc::tag_str(first)) &&
                          contains(mismatch, "NCCL links need sends and receives in the same order"),
                      mismatch);
  BOOST_TEST(same_bits(got, activation(1, Device::cpu())));
}

// A V schedule sends activations and gradients both ways between the same two stages: each kind has
// its own channel, so the receiver may take a gradient before an activation that was sent first.
BOOST_AUTO_TEST_CASE(activations_and_gradients_keep_separate_orders) {
  Tensor got_activation, got_gradient;
  run_pair(
      "channels",
      [&](rpc::NcclTransport& t) {
        t.connect(1, in_ms(60000));
        t.send(1, activation_tag(0), activation(0, Device::cuda(0)), in_ms(60000));
        t.send(1, gradient_tag(0), gradient(0, Device::cuda(0)), in_ms(60000));
      },
      [&](rpc::NcclTransport& t) {
        t.connect(0, in_ms(60000));
        got_gradient = t.recv(0, gradient_tag(0), in_ms(60000)).to(Device::cpu());
        got_activation = t.recv(0, activation_tag(0), in_ms(60000)).to(Device::cpu());
      });
  BOOST_TEST(same_bits(got_activation, activation(0, Device::cpu())));
  BOOST_TEST(same_bits(got_gradient, gradient(0, Device::cpu())));
}

BOOST_AUTO_TEST_CASE(recv_on_an_open_link_times_out_naming_the_peer) {
  const Tag sent = gradient_tag(0);
  const Tag never = gradient_tag(1);
  std::string timeout;
  std::chrono::steady_clock::duration waited{};
  std::promise<void> finished;
  run_pair(
      "timeout",
      [&](rpc::NcclTransport& t) {
        t.send(1, sent, gradient(0, Device::cuda(0)), in_ms(60000));
        finished.get_future().wait_for(60s);   // stays alive, silent, until rank 1 gave up
      },
      [&](rpc::NcclTransport& t) {
        t.recv(0, sent, in_ms(60000));
        const auto start = std::chrono::steady_clock::now();
        timeout = error_of<rpc::TimeoutError>([&] { t.recv(0, never, in_ms(200)); });
        waited = std::chrono::steady_clock::now() - start;
        finished.set_value();
      });
  BOOST_CHECK_MESSAGE(contains(timeout, "rank 1 receiving " + rpc::tag_str(never) + " from rank 0") &&
                          contains(timeout, "timed out"),
                      timeout);
  BOOST_TEST((waited >= 150ms && waited < 10s));
}

BOOST_AUTO_TEST_SUITE_END()   // two_gpus

#endif   // PW_WITH_CUDA

BOOST_AUTO_TEST_SUITE_END()   // nccl_gpu

}  // namespace pw
