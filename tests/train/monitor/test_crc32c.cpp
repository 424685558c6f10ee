// CRC-32C against published check values (RFC 3720's test vectors and the standard check string),
// and the mask TensorFlow's record framing applies.
#include <cstring>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "train/monitor/crc32c.h"

using pw::monitor::crc32c;
using pw::monitor::masked_crc32c;

namespace {
std::uint32_t crc_of(const std::vector<unsigned char>& bytes) { return crc32c(std::as_bytes(std::span(bytes))); }
}  // namespace

BOOST_AUTO_TEST_SUITE(crc32c_checks)

BOOST_AUTO_TEST_CASE(known_values) {
  const std::string check = "123456789";
  BOOST_TEST(crc_of(std::vector<unsigned char>(check.begin(), check.end())) == 0xE3069283u);
  BOOST_TEST(crc_of(std::vector<unsigned char>(32, 0x00)) == 0x8A9136AAu);
  BOOST_TEST(crc_of(std::vector<unsigned char>(32, 0xFF)) == 0x62A8AB43u);
  std::vector<unsigned char> ascending(32);
  for (int i = 0; i < 32; ++i) ascending[static_cast<std::size_t>(i)] = static_cast<unsigned char>(i);
  BOOST_TEST(crc_of(ascending) == 0x46DD794Eu);
  BOOST_TEST(crc_of({}) == 0u);
}

BOOST_AUTO_TEST_CASE(the_mask_rotates_and_offsets) {
  const std::string check = "123456789";
  const auto bytes = std::as_bytes(std::span(check.data(), check.size()));
  BOOST_TEST(masked_crc32c(bytes) == 0xC78AB0E5u);   // rotate 0xE3069283 right by 15, add 0xA282EAD8
  BOOST_TEST(masked_crc32c(bytes) != crc32c(bytes));
}

BOOST_AUTO_TEST_SUITE_END()
