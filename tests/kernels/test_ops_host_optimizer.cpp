// The vectorised CPU optimizer (kernels/cpu/vector_optimizer.h, kernels/ops/host_optimizer.h)
// against the device updates (kernels/ops/optimizer.h, whose F32 loops take the best of these
// paths, F64 the plain loops): every instruction set this CPU has, the scalar loop included, gives
// the same bits, over sizes with and without a vector tail, several steps, with and without
// weight decay. And host tensors (Tensor::empty_host) count for their device outside its cap.
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kernels/host_ledger.h"
#include "kernels/ops/host_optimizer.h"
#include "kernels/runtime.h"

using namespace pw::kernels;

namespace {

const std::int64_t kSizes[] = {1, 7, 8, 15, 16, 17, 100, 16384, 2 * 16384 + 13};

std::vector<float> random_values(std::int64_t n, unsigned seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(static_cast<std::size_t>(n));
  for (auto& x : out) x = dist(rng);
  return out;
}

Tensor tensor_of(const std::vector<float>& v) {
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
}

std::vector<float> values(const Tensor& t) { return t.to_float_vector(); }

std::vector<VectorIsa> supported_isas() {
  std::vector<VectorIsa> out;
  for (auto isa : {VectorIsa::Scalar, VectorIsa::Avx2, VectorIsa::Avx512})
    if (cpu::vector_isa_supported(isa)) out.push_back(isa);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(host_optimizer)

BOOST_AUTO_TEST_CASE(the_best_instruction_set_is_supported) {
  BOOST_TEST(cpu::vector_isa_supported(cpu::best_vector_isa()));
  BOOST_TEST_MESSAGE("vectorised optimizer: " << cpu::vector_isa_name(cpu::best_vector_isa()));
}

BOOST_AUTO_TEST_CASE(adam_is_the_reference_bit_for_bit_on_every_instruction_set) {
  for (const auto isa : supported_isas())
    for (const auto n : kSizes)
      for (const double wd : {0.0, 0.01}) {
        BOOST_TEST_CONTEXT(cpu::vector_isa_name(isa) << ", " << n << " elements, weight decay " << wd) {
          const auto w0 = random_values(n, 1, -1.0f, 1.0f);
          Tensor w_ref = tensor_of(w0), m_ref = Tensor::zeros({n}), v_ref = Tensor::zeros({n});
          Tensor w = tensor_of(w0), m = Tensor::zeros({n}), v = Tensor::zeros({n});
          const AdamParams p{1e-2, 0.9, 0.999, 1e-8, wd};
          for (std::int64_t step = 1; step <= 4; ++step) {
            const Tensor g = tensor_of(random_values(n, 100 + static_cast<unsigned>(step), -0.5f, 0.5f));
            adam_update(w_ref, g, m_ref, v_ref, p, step);
            host_adam_update(w, g, m, v, p, step, isa);
          }
          BOOST_TEST(values(w) == values(w_ref));
          BOOST_TEST(values(m) == values(m_ref));
          BOOST_TEST(values(v) == values(v_ref));
          BOOST_TEST(values(w) != w0);   // it did update
        }
      }
}

BOOST_AUTO_TEST_CASE(sgd_and_adagrad_are_the_reference_bit_for_bit_on_every_instruction_set) {
  for (const auto isa : supported_isas())
    for (const auto n : kSizes)
      for (const double momentum : {0.0, 0.9}) {
        BOOST_TEST_CONTEXT(cpu::vector_isa_name(isa) << ", " << n << " elements, momentum " << momentum) {
          const auto w0 = random_values(n, 2, -1.0f, 1.0f);
          Tensor w_ref = tensor_of(w0), buf_ref = Tensor::zeros({n}), acc_ref = Tensor::zeros({n});
          Tensor w = tensor_of(w0), buf = Tensor::zeros({n}), acc = Tensor::zeros({n});
          Tensor wa_ref = tensor_of(w0), wa = tensor_of(w0);
          // Weight decay with momentum, none without: both branches of each.
          const double decay = momentum != 0.0 ? 0.01 : 0.0;
          const SgdParams sgd{0.05, momentum, decay};
          const AdagradParams adagrad{0.05, 1e-10, decay};
          for (std::int64_t step = 1; step <= 3; ++step) {
            const Tensor g = tensor_of(random_values(n, 200 + static_cast<unsigned>(step), -0.5f, 0.5f));
            sgd_update(w_ref, g, buf_ref, sgd, step);
            host_sgd_update(w, g, buf, sgd, step, isa);
            adagrad_update(wa_ref, g, acc_ref, adagrad);
            host_adagrad_update(wa, g, acc, adagrad, isa);
          }
          BOOST_TEST(values(w) == values(w_ref));
          BOOST_TEST(values(buf) == values(buf_ref));
          BOOST_TEST(values(wa) == values(wa_ref));
          BOOST_TEST(values(acc) == values(acc_ref));
        }
      }
}

BOOST_AUTO_TEST_CASE(other_dtypes_take_the_reference) {
  const std::int64_t n = 37;
  auto make = [&] { return Tensor::from_vector(std::vector<double>(n, 0.5), {n}); };
  Tensor w = make(), g = make(), m = Tensor::zeros({n}, DType::F64), v = Tensor::zeros({n}, DType::F64);
  Tensor w_ref = make(), m_ref = Tensor::zeros({n}, DType::F64), v_ref = Tensor::zeros({n}, DType::F64);
  host_adam_update(w, g, m, v, {}, 1);
  adam_update(w_ref, g, m_ref, v_ref, {}, 1);
  BOOST_TEST(w.to_double_vector() == w_ref.to_double_vector());
}

// Host tensors held for cpu:5 count in its host ledger by kind, not in its capped allocator; a
// clone stays host memory; both go when the tensors do.
BOOST_AUTO_TEST_CASE(host_tensors_count_for_their_device_outside_its_cap) {
  const Device device = Device::cpu(5);
  auto& allocator = DeviceRuntime::get(device).allocator();
  allocator.set_cap(4096);
  const auto device_before = allocator.stats().in_use;
  const auto host_before = host_memory_stats(device);
  const auto state = static_cast<std::size_t>(MemoryKind::OptimizerState);
  {
    MemoryKindScope kind(MemoryKind::OptimizerState);
    Tensor big = Tensor::zeros_host({1 << 16}, DType::F32, device);   // 256 KiB, over the 4 KiB cap
    BOOST_TEST(big.device().str() == device.str());
    BOOST_TEST(big.is_host_memory());
    const auto host = host_memory_stats(device);
    BOOST_TEST(host.in_use_by_kind[state] - host_before.in_use_by_kind[state] == std::int64_t{1} << 18);
    BOOST_TEST(allocator.stats().in_use == device_before);
    const Tensor copy = big.clone();
    BOOST_TEST(copy.is_host_memory());
    BOOST_TEST(host_memory_stats(device).in_use - host_before.in_use == std::int64_t{1} << 19);
    BOOST_CHECK_THROW(Tensor::zeros({1 << 16}, DType::F32, device), OutOfMemory);   // the cap still holds the device
  }
  BOOST_TEST(host_memory_stats(device).in_use == host_before.in_use);
  BOOST_TEST(host_memory_stats(device).peak_in_use >= (std::int64_t{1} << 19));
  allocator.set_cap(0);
}

BOOST_AUTO_TEST_SUITE_END()
