#include "rpc/peer_link.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

namespace pw::rpc {

namespace {

namespace transport = apache::thrift::transport;
using Clock = std::chrono::steady_clock;

constexpr auto kMaxConnectAttempt = std::chrono::milliseconds(2000);
constexpr auto kRetryPause = std::chrono::milliseconds(20);

// Thrift treats a timeout of 0 as "wait forever", so an expired deadline still gets 1 ms.
int millis_until(Deadline deadline, std::chrono::milliseconds cap = std::chrono::milliseconds::max()) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(std::min(left, cap).count(), 1, INT32_MAX));
}

}  // namespace

PeerLink::PeerLink(int self_rank, int peer_rank, HostPort address)
    : self_rank_(self_rank), peer_rank_(peer_rank), address_(std::move(address)) {}

PeerLink::~PeerLink() { close(); }

std::string PeerLink::who() const { return "rank " + std::to_string(peer_rank_) + " at " + address_.str(); }

void PeerLink::set_address(HostPort address) {
  std::lock_guard lock(mutex_);
  close();
  address_ = std::move(address);
}

void PeerLink::close() noexcept {
  client_.reset();
  if (framed_) {
    try {
      socket_->close();
    } catch (...) {
    }
  }
  framed_.reset();
  socket_.reset();
}

void PeerLink::connect(const Tag& tag, Deadline deadline, const std::function<void()>& throw_if_aborted) {
  std::string last_error;
  while (true) {
    throw_if_aborted();
    if (Clock::now() >= deadline)
      throw TimeoutError("rank " + std::to_string(self_rank_) + " could not reach " + who() + " to send the " +
                         tag_str(tag) + " before the deadline: " + last_error);
    auto socket = std::make_shared<transport::TSocket>(address_.host, address_.port);
    socket->setConnTimeout(millis_until(deadline, kMaxConnectAttempt));
    socket->setNoDelay(true);
    try {
      socket->open();
      socket_ = socket;
      framed_ = std::make_shared<transport::TFramedTransport>(socket_);
      client_ = std::make_unique<wire::TensorTransferClient>(
          std::make_shared<apache::thrift::protocol::TBinaryProtocol>(framed_));
      return;
    } catch (const transport::TTransportException& e) {
      last_error = e.what();   // typically "connection refused" while the peer is still starting
    }
    std::this_thread::sleep_until(std::min(deadline, Clock::now() + kRetryPause));
  }
}

void PeerLink::deliver(const wire::TensorFrame& frame, const Tag& tag, Deadline deadline,
                       const std::function<void()>& throw_if_aborted) {
  std::lock_guard lock(mutex_);
  if (!client_) connect(tag, deadline, throw_if_aborted);
  const int timeout_ms = millis_until(deadline);
  socket_->setSendTimeout(timeout_ms);
  socket_->setRecvTimeout(timeout_ms);
  const std::string what = "the " + tag_str(tag) + " from rank " + std::to_string(self_rank_) + " to " + who();
  try {
    client_->deliver(frame);
  } catch (const wire::FrameRejected& rejected) {
    throw Error("rank " + std::to_string(peer_rank_) + " refused the frame: " + rejected.reason + " (" + what + ")");
  } catch (const transport::TTransportException& e) {
    close();   // the stream is out of step after a partial exchange
    if (e.getType() == transport::TTransportException::TIMED_OUT)
      throw TimeoutError("timed out sending " + what + ": " + e.what());
    throw Error("lost the connection while sending " + what + ": " + e.what() +
                " (a frame over the receiver's maximum frame size also closes the connection)");
  } catch (const apache::thrift::TException& e) {
    close();
    throw Error("failed to send " + what + ": " + e.what());
  }
}

}  // namespace pw::rpc
