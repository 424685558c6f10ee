// RoutingTransport sends each peer's messages over that link's transport and aborts them all.
#include <boost/test/unit_test.hpp>

#include "rpc/in_process_transport.h"
#include "rpc/routing_transport.h"

using namespace pw;

BOOST_AUTO_TEST_SUITE(routing_transport)

BOOST_AUTO_TEST_CASE(each_peer_goes_over_its_own_link) {
  rpc::InProcessHub near(3), far(3);
  auto near0 = near.endpoint(0), near1 = near.endpoint(1), far0 = far.endpoint(0), far2 = far.endpoint(2);
  rpc::RoutingTransport rank0(0, {nullptr, near0.get(), far0.get()});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  const rpc::Tag tag{1, 0, rpc::PayloadKind::Activation, 1};
  const auto x = kernels::Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  rank0.send(1, tag, x, deadline);
  rank0.send(2, tag, x, deadline);
  BOOST_TEST(near1->recv(0, tag, deadline).to_float_vector() == x.to_float_vector());
  BOOST_TEST(far2->recv(0, tag, deadline).to_float_vector() == x.to_float_vector());
  far2->send(0, tag, x, deadline);
  BOOST_TEST(rank0.recv(2, tag, deadline).to_float_vector() == x.to_float_vector());
  BOOST_CHECK_THROW(rank0.send(0, tag, x, deadline), Error);   // no link to itself
  rank0.abort("stop");
  BOOST_CHECK_THROW(near1->recv(0, tag, deadline), rpc::AbortedError);
  BOOST_CHECK_THROW(far2->recv(0, tag, deadline), rpc::AbortedError);
}

BOOST_AUTO_TEST_CASE(a_missing_link_is_refused) {
  rpc::InProcessHub hub(2);
  BOOST_CHECK_THROW(rpc::RoutingTransport(0, {nullptr, nullptr}), Error);
}

BOOST_AUTO_TEST_SUITE_END()
