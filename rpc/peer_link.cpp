#include "rpc/peer_link.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include <sys/socket.h>

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include "core/log.h"
#include "rpc/frame_codec.h"
#include "rpc/streaming_framed_transport.h"

namespace pw::rpc {

namespace {

namespace protocol = apache::thrift::protocol;
namespace transport = apache::thrift::transport;
using Clock = std::chrono::steady_clock;

constexpr auto kMaxConnectAttempt = std::chrono::milliseconds(2000);
constexpr auto kRetryPause = std::chrono::milliseconds(20);
// How long a closing link waits for the answers to its pipelined frames.
constexpr auto kDrainTimeout = std::chrono::milliseconds(2000);

// Thrift treats a timeout of 0 as "wait forever", so an expired deadline still gets 1 ms.
int millis_until(Deadline deadline, std::chrono::milliseconds cap = std::chrono::milliseconds::max()) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(std::min(left, cap).count(), 1, INT32_MAX));
}

}  // namespace

PeerLink::PeerLink(int self_rank, int peer_rank, HostPort address, Tls tls)
    : self_rank_(self_rank), peer_rank_(peer_rank), address_(std::move(address)), tls_(std::move(tls)) {}

PeerLink::~PeerLink() {
  drain_answers();
  close();
}

std::string PeerLink::who() const { return "rank " + std::to_string(peer_rank_) + " at " + address_.str(); }

std::string PeerLink::describe(const Tag& tag) const {
  return "the " + tag_str(tag) + " from rank " + std::to_string(self_rank_) + " to " + who();
}

void PeerLink::set_address(HostPort address) {
  std::lock_guard lock(mutex_);
  drain_answers();
  close();
  address_ = std::move(address);
}

void PeerLink::interrupt() noexcept {
  std::lock_guard lock(fd_mutex_);
  if (socket_fd_ >= 0) ::shutdown(socket_fd_, SHUT_RDWR);
  interrupted_ = true;
}

void PeerLink::close() noexcept {
  {
    std::lock_guard lock(fd_mutex_);
    socket_fd_ = -1;
    interrupted_ = false;
  }
  unanswered_.clear();
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

std::string PeerLink::read_answer() {
  std::string refusal;
  try {
    client_->recv_deliver();
  } catch (const wire::FrameRejected& rejected) {
    refusal = "rank " + std::to_string(peer_rank_) + " refused the frame: " + rejected.reason + " (" +
              describe(unanswered_.front()) + ")";
  }
  unanswered_.pop_front();
  return refusal;
}

void PeerLink::drain_answers() noexcept {
  if (!client_ || unanswered_.empty()) return;
  const Deadline give_up = Clock::now() + kDrainTimeout;
  try {
    while (!unanswered_.empty()) {
      socket_->setRecvTimeout(millis_until(give_up));
      if (std::string refusal = read_answer(); !refusal.empty()) PW_LOG(Warn, refusal);
    }
  } catch (const std::exception& e) {
    PW_LOG(Warn, "rank " << self_rank_ << " closes its connection to " << who() << " with " << unanswered_.size()
                         << " frame(s) unanswered: " << e.what());
    close();
  }
}

void PeerLink::connect(const Tag& tag, Deadline deadline, const std::function<void()>& throw_if_aborted) {
  std::string last_error;
  while (true) {
    throw_if_aborted();
    if (Clock::now() >= deadline)
      throw TimeoutError("rank " + std::to_string(self_rank_) + " could not reach " + who() + " to send the " +
                         tag_str(tag) + " before the deadline: " + last_error);
    auto socket = make_client_socket(tls_, address_);
    socket->setNoDelay(true);
    try {
      try {
        open_client_socket(*socket, address_, std::chrono::milliseconds(millis_until(deadline, kMaxConnectAttempt)));
      } catch (const TlsError& e) {
        throw TlsError("rank " + std::to_string(self_rank_) + " could not reach " + who() + " to send the " +
                           tag_str(tag),
                       e.reason());
      }
      socket_ = socket;
      {
        std::lock_guard lock(fd_mutex_);
        socket_fd_ = static_cast<int>(socket->getSocketFD());
        interrupted_ = false;
      }
      try {
        throw_if_aborted();   // an abort while this connection was opening did not see it
      } catch (...) {
        close();
        throw;
      }
      framed_ = std::make_shared<StreamingFramedTransport>(socket_, std::make_shared<apache::thrift::TConfiguration>());
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
  deliver(frame, std::as_bytes(std::span(frame.data)), tag, deadline, throw_if_aborted);
}

void PeerLink::deliver(const wire::TensorFrame& header, std::span<const std::byte> data, const Tag& tag,
                       Deadline deadline, const std::function<void()>& throw_if_aborted) {
  std::lock_guard lock(mutex_);
  {
    bool stale = false;
    {
      std::lock_guard fd_lock(fd_mutex_);
      stale = interrupted_;
    }
    if (stale) close();   // shut down by an earlier abort: a recovered job connects again
  }
  if (!client_) connect(tag, deadline, throw_if_aborted);
  const int timeout_ms = millis_until(deadline);
  socket_->setSendTimeout(timeout_ms);
  socket_->setRecvTimeout(timeout_ms);
  const std::size_t pipelined_before = unanswered_.size();
  std::string refusal;   // the first refusal read; the frame it names may be an earlier one
  try {
    while (refusal.empty() && unanswered_.size() >= kUnansweredFrames) refusal = read_answer();
    if (refusal.empty()) {
      // The transport keeps pointers into `data` until flush() writes them: within this call.
      protocol::TProtocol& out = *client_->getOutputProtocol();
      write_deliver_call(out, header, data);
      out.getTransport()->writeEnd();
      out.getTransport()->flush();
      unanswered_.push_back(tag);
      if (data.size() < kPipelinedAtLeast) {
        while (!unanswered_.empty()) {
          std::string answer = read_answer();
          if (refusal.empty()) refusal = std::move(answer);
        }
      }
    }
  } catch (const transport::TTransportException& e) {
    close();   // the stream is out of step after a partial exchange
    throw_if_aborted();   // interrupt() shut the connection down
    const std::string what = describe(tag) + (pipelined_before == 0 ? std::string()
                                                                    : " (after " + std::to_string(pipelined_before) +
                                                                          " pipelined frame(s) not yet answered)");
    if (e.getType() == transport::TTransportException::TIMED_OUT)
      throw TimeoutError("timed out sending " + what + ": " + e.what());
    throw PeerLostError("lost the connection while sending " + what + ": " + e.what() +
                " (a frame over the receiver's maximum frame size also closes the connection)");
  } catch (const apache::thrift::TException& e) {
    close();
    throw Error("failed to send " + describe(tag) + ": " + e.what());
  } catch (...) {
    close();   // a half-written call may have left pointers into `data` in the transport
    throw;
  }
  if (!refusal.empty()) throw Error(refusal);
}

}  // namespace pw::rpc
