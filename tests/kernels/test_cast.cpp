// BF16 and F16 storage: conversions from and to F32 against PyTorch's on edge cases and many
// magnitudes (tests/golden/half_golden.safetensors, made by tests/golden/make_half_golden.py),
// every 16-bit pattern through F32 and back, Tensor::to on CPU tensors, and safetensors files.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <vector>

#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "kernels/half_float.h"
#include "kernels/ops/cast.h"
#include "kernels/safetensors.h"
#include "tests/support/test_util.h"

namespace pk = pw::kernels;
using pk::DType;
using pk::Tensor;

namespace {

const pk::NamedTensors& golden() {
  static const pk::NamedTensors tensors =
      pk::load_safetensors(pw::test::source_dir() + "/tests/golden/half_golden.safetensors");
  return tensors;
}

std::vector<std::uint16_t> bits_of(const Tensor& t) {
  BOOST_REQUIRE(pk::dtype_size(t.dtype()) == 2);
  const Tensor host = t.to(pk::Device::cpu());
  const auto* p = host.data<std::uint16_t>();
  return {p, p + host.numel()};
}

bool is_nan_bf16(std::uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }
bool is_nan_f16(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

void check_bits(const std::vector<std::uint16_t>& ours, const std::vector<std::uint16_t>& torch, const Tensor& input,
                bool (*is_nan)(std::uint16_t), const char* what) {
  BOOST_REQUIRE_EQUAL(ours.size(), torch.size());
  const auto* x = input.data<float>();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const bool same = ours[i] == torch[i] || (is_nan(ours[i]) && is_nan(torch[i]));
    if (!same && wrong++ < 5)
      BOOST_ERROR(what << ": " << x[i] << " (float bits 0x" << std::hex << pk::float_bits(x[i]) << ") gives 0x"
                       << ours[i] << ", PyTorch 0x" << torch[i] << std::dec);
  }
  BOOST_TEST(wrong == 0u, what << ": " << wrong << " of " << ours.size() << " values differ");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cast)

BOOST_AUTO_TEST_CASE(narrowing_matches_pytorch_bit_for_bit) {
  const Tensor& input = golden().at("input");
  BOOST_REQUIRE((input.dtype() == DType::F32));
  BOOST_REQUIRE(golden().at("bf16").dtype() == DType::BF16);
  BOOST_REQUIRE(golden().at("f16").dtype() == DType::F16);
  check_bits(bits_of(input.to(DType::BF16)), bits_of(golden().at("bf16")), input, is_nan_bf16, "F32 -> BF16");
  check_bits(bits_of(input.to(DType::F16)), bits_of(golden().at("f16")), input, is_nan_f16, "F32 -> F16");
}

BOOST_AUTO_TEST_CASE(widening_is_exact) {
  // PyTorch's BF16/F16 values widened by us equal the F32 values PyTorch's own rounding implies.
  for (const char* name : {"bf16", "f16"}) {
    const Tensor& half = golden().at(name);
    const auto wide = half.to(DType::F32).to_double_vector();
    const auto back = bits_of(half.to(DType::F32).to(half.dtype()));
    const auto orig = bits_of(half);
    for (std::size_t i = 0; i < wide.size(); ++i) {
      if (std::isnan(wide[i])) continue;
      BOOST_TEST(back[i] == orig[i], name << " value " << i << " does not survive F32 and back");
    }
  }
}

BOOST_AUTO_TEST_CASE(every_16_bit_pattern_survives_float_and_back) {
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    const float fb = pk::bf16_to_float(b);
    if (std::isnan(fb)) BOOST_TEST(is_nan_bf16(pk::float_to_bf16(fb)));
    else if (pk::float_to_bf16(fb) != b) BOOST_ERROR("bf16 0x" << std::hex << h << " comes back as 0x" << pk::float_to_bf16(fb));
    const float fh = pk::f16_to_float(b);
    if (std::isnan(fh)) BOOST_TEST(is_nan_f16(pk::float_to_f16(fh)));
    else if (pk::float_to_f16(fh) != b) BOOST_ERROR("f16 0x" << std::hex << h << " comes back as 0x" << pk::float_to_f16(fh));
  }
}

BOOST_AUTO_TEST_CASE(format_edges) {
  BOOST_TEST(pk::float_to_f16(65504.0f) == 0x7bffu);
  BOOST_TEST(pk::float_to_f16(65519.0f) == 0x7bffu);                 // below the halfway point: largest finite
  BOOST_TEST(pk::float_to_f16(65520.0f) == 0x7c00u);                 // the tie rounds to even: infinity
  BOOST_TEST(pk::float_to_f16(std::ldexp(1.0f, -24)) == 0x0001u);    // smallest subnormal
  BOOST_TEST(pk::float_to_f16(std::ldexp(1.0f, -25)) == 0x0000u);    // half of it: ties to even (zero)
  BOOST_TEST(pk::float_to_f16(std::ldexp(3.0f, -25)) == 0x0002u);    // 1.5 subnormals: ties to even (2)
  BOOST_TEST(pk::float_to_f16(-0.0f) == 0x8000u);
  BOOST_TEST(pk::f16_to_float(0x0001u) == std::ldexp(1.0f, -24));
  BOOST_TEST(pk::float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80u);   // tie, even below
  BOOST_TEST(pk::float_to_bf16(1.0f + std::ldexp(3.0f, -8)) == 0x3f82u);   // tie, even above
  BOOST_TEST(pk::float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80u);   // rounds to infinity
  BOOST_TEST(std::isinf(pk::bf16_to_float(pk::float_to_bf16(-std::numeric_limits<float>::infinity()))));
}

BOOST_AUTO_TEST_CASE(tensors_convert_between_every_floating_dtype) {
  const Tensor x = pw::test::random_tensor({7, 13}, 5, -3.0, 3.0);
  for (const DType half : {DType::BF16, DType::F16}) {
    const Tensor h = x.to(half);
    BOOST_TEST((h.dtype() == half));
    BOOST_TEST(h.nbytes() == x.nbytes() / 2);
    // Through F64 and back gives the same bits as directly.
    BOOST_TEST(bits_of(x.to(DType::F64).to(half)) == bits_of(h));
    const double eps = half == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    pw::test::check_close(h.to(DType::F32), x, eps, 0.0, std::string("round trip through ") + pk::dtype_name(half));
  }
  BOOST_CHECK_THROW(pk::cast(Tensor::zeros({2}, DType::I64), DType::BF16), pw::Error);
}

BOOST_AUTO_TEST_CASE(safetensors_keep_half_tensors) {
  const Tensor x = pw::test::random_tensor({5, 3}, 9);
  const auto path = std::filesystem::temp_directory_path() / ("pw_test_cast_" + std::to_string(::getpid()) + ".safetensors");
  pk::save_safetensors(path.string(), {{"a.bf16", x.to(DType::BF16)}, {"a.f16", x.to(DType::F16)}});
  const auto back = pk::load_safetensors(path.string());
  std::filesystem::remove(path);
  BOOST_TEST((back.at("a.bf16").dtype() == DType::BF16));
  BOOST_TEST((back.at("a.f16").dtype() == DType::F16));
  BOOST_TEST(bits_of(back.at("a.bf16")) == bits_of(x.to(DType::BF16)));
  BOOST_TEST(bits_of(back.at("a.f16")) == bits_of(x.to(DType::F16)));
}

BOOST_AUTO_TEST_SUITE_END()
