// The parameter-server calls the client writes by hand (client_wire.h) are byte for byte the ones
// Thrift's generated ParameterServerClient writes, through the transport the client uses: keys
// written as one block, gradient rows gathered from anywhere in the caller's array or sent from it
// in adjacent runs (a run of 16 KiB or more is not copied into the frame).
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrift/TConfiguration.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include "dataparallel/ps/client_wire.h"
#include "pw_thrift/ParameterServer.h"
#include "rpc/streaming_framed_transport.h"

namespace {

namespace protocol = apache::thrift::protocol;
namespace transport = apache::thrift::transport;

// A protocol over the framed transport the client uses, writing into memory.
struct Wire {
  std::shared_ptr<transport::TMemoryBuffer> bytes = std::make_shared<transport::TMemoryBuffer>();
  std::shared_ptr<protocol::TBinaryProtocol> out = std::make_shared<protocol::TBinaryProtocol>(
      std::make_shared<pw::rpc::StreamingFramedTransport>(bytes, std::make_shared<apache::thrift::TConfiguration>()));
  std::string sent() const { return bytes->getBufferAsString(); }
};

std::vector<std::int64_t> some_keys(std::size_t n) {
  std::vector<std::int64_t> keys(n);
  for (std::size_t i = 0; i < n; ++i) keys[i] = static_cast<std::int64_t>(i * 0x9E3779B97F4A7C15ULL >> 3) - 12345;
  return keys;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(client_wire)

BOOST_AUTO_TEST_CASE(a_pull_is_the_generated_clients_pull) {
  const std::string token = "token", table = "clicks";
  for (const std::size_t n : {std::size_t{0}, std::size_t{3}, std::size_t{5000}}) {   // 5000 keys: a 40 KB block
    const auto keys = some_keys(n);
    Wire ours, theirs;
    pw::dp::send_pull(*ours.out, pw::dp::PullCall{token, table, keys.data(), keys.size(), 42, -1, 1500});
    pw::rpc::wire::ParameterServerClient(theirs.out).send_pull(token, table, keys, 42, -1, 1500);
    BOOST_TEST((ours.sent() == theirs.sent()), n << " keys");
  }
}

BOOST_AUTO_TEST_CASE(a_push_is_the_generated_clients_push) {
  const std::string token = "token", table = "clicks";
  const std::size_t n = 3000, dim = 8;   // 3000 rows of 32 bytes: adjacent runs of 96 KB
  const auto keys = some_keys(n);
  std::vector<float> grads(n * dim);
  std::iota(grads.begin(), grads.end(), 0.5f);
  std::vector<std::size_t> in_order(n), reversed(n);
  std::iota(in_order.begin(), in_order.end(), std::size_t{0});
  for (std::size_t k = 0; k < n; ++k) reversed[k] = n - 1 - k;
  for (const auto* rows_at : {&in_order, &reversed}) {
    for (const auto [begin, end] : {std::pair<std::size_t, std::size_t>{0, n}, {1000, 2500}, {7, 7}}) {
      Wire ours, theirs;
      pw::dp::send_push(*ours.out, pw::dp::PushCall{token, table, 3, 42, keys, grads.data(), dim, *rows_at, begin, end, 1,
                                                    2, 99});
      std::string gathered;
      for (std::size_t k = begin; k < end; ++k)
        gathered.append(reinterpret_cast<const char*>(grads.data() + (*rows_at)[k] * dim), dim * sizeof(float));
      const std::vector<std::int64_t> part(keys.begin() + static_cast<std::ptrdiff_t>(begin),
                                           keys.begin() + static_cast<std::ptrdiff_t>(end));
      pw::rpc::wire::ParameterServerClient(theirs.out).send_push(token, table, 3, 42, part, gathered, 1, 2, 99);
      BOOST_TEST((ours.sent() == theirs.sent()),
                 (rows_at == &in_order ? "rows in order" : "rows reversed") << ", keys " << begin << ".." << end);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
