// StreamingFramedTransport writes the bytes TFramedTransport writes, whether a write was copied
// into its buffer or (16 KiB and up) sent from the caller's memory on flush (so the bytes sent are
// the caller's as they are at the flush); a closed transport forgets the writes it had not sent.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrift/TConfiguration.h>
#include <thrift/transport/TBufferTransports.h>

#include "rpc/streaming_framed_transport.h"

namespace transport = apache::thrift::transport;
using pw::rpc::StreamingFramedTransport;

namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

std::string sent(transport::TMemoryBuffer& wire) { return wire.getBufferAsString(); }

}  // namespace

BOOST_AUTO_TEST_SUITE(streaming_framed_transport)

BOOST_AUTO_TEST_CASE(copied_and_referenced_writes_make_the_frame_tframedtransport_makes) {
  // Small and large writes interleaved, a large one first and last, two large ones in a row.
  const std::vector<std::vector<std::uint8_t>> writes = {pattern(20000, 1), pattern(3, 2),   pattern(16 * 1024, 3),
                                                         pattern(70000, 4), pattern(100, 5), pattern(1, 6),
                                                         pattern(16 * 1024 - 1, 7), pattern(65536, 8)};
  auto ours_wire = std::make_shared<transport::TMemoryBuffer>();
  auto reference_wire = std::make_shared<transport::TMemoryBuffer>();
  StreamingFramedTransport ours(ours_wire, std::make_shared<apache::thrift::TConfiguration>());
  transport::TFramedTransport reference(reference_wire);
  for (int frame = 0; frame < 2; ++frame) {   // the second frame starts from a reset transport
    for (const auto& w : writes) {
      ours.write(w.data(), static_cast<std::uint32_t>(w.size()));
      reference.write(w.data(), static_cast<std::uint32_t>(w.size()));
    }
    BOOST_TEST(ours.writeEnd() == reference.writeEnd());
    ours.flush();
    reference.flush();
  }
  BOOST_TEST(sent(*ours_wire).size() == sent(*reference_wire).size());
  BOOST_TEST((sent(*ours_wire) == sent(*reference_wire)));

  // And it reads back what it wrote.
  StreamingFramedTransport reader(ours_wire, std::make_shared<apache::thrift::TConfiguration>());
  for (int frame = 0; frame < 2; ++frame)
    for (const auto& w : writes) {
      std::vector<std::uint8_t> got(w.size());
      reader.readAll(got.data(), static_cast<std::uint32_t>(got.size()));
      BOOST_TEST((got == w));
    }
}

BOOST_AUTO_TEST_CASE(a_large_write_is_sent_from_the_callers_memory_as_it_is_at_flush) {
  auto wire = std::make_shared<transport::TMemoryBuffer>();
  StreamingFramedTransport t(wire, std::make_shared<apache::thrift::TConfiguration>());
  auto large = pattern(16 * 1024, 1);
  auto small = pattern(16 * 1024 - 1, 2);
  t.write(large.data(), static_cast<std::uint32_t>(large.size()));
  t.write(small.data(), static_cast<std::uint32_t>(small.size()));
  large[0] = 0xEE;   // after the write, before the flush: the large one was not copied
  small[0] = 0xEE;   // the small one was
  t.flush();
  const std::string bytes = sent(*wire);
  BOOST_REQUIRE(bytes.size() == 4 + large.size() + small.size());
  BOOST_TEST(static_cast<std::uint8_t>(bytes[4]) == 0xEE);
  BOOST_TEST(static_cast<std::uint8_t>(bytes[4 + large.size()]) == 2);
}

BOOST_AUTO_TEST_CASE(closing_forgets_writes_that_were_not_sent) {
  auto wire = std::make_shared<transport::TMemoryBuffer>();
  StreamingFramedTransport t(wire, std::make_shared<apache::thrift::TConfiguration>());
  {
    const auto gone = pattern(32 * 1024, 9);   // dies before any flush: only its pointer was kept
    t.write(gone.data(), static_cast<std::uint32_t>(gone.size()));
    t.write(gone.data(), 10);
  }
  t.close();
  BOOST_TEST(t.writeEnd() == 4u);   // the length prefix alone
  wire->open();
  const auto kept = pattern(5, 1);
  t.write(kept.data(), static_cast<std::uint32_t>(kept.size()));
  t.flush();
  BOOST_TEST(sent(*wire) == std::string("\0\0\0\5", 4) + std::string(kept.begin(), kept.end()));
}

BOOST_AUTO_TEST_SUITE_END()
