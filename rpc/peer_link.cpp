#include "rpc/peer_link.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include <sys/socket.h>

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>
#include <thrift/transport/TVirtualTransport.h>

#include "core/log.h"
#include "rpc/frame_codec.h"

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

// Writes exactly what TFramedTransport writes (a 4-byte big-endian length, then the message), but
// large writes -- the tensor bytes of a frame -- are not copied into the frame buffer: the
// transport keeps a pointer to them and writes them straight to the socket on flush(). This is
// safe because the generated client serializes and flushes within one call, while the frame it
// was given is alive. Replies are read through an ordinary TFramedTransport on the same socket.
class GatherFramedTransport : public transport::TVirtualTransport<GatherFramedTransport> {
 public:
  explicit GatherFramedTransport(std::shared_ptr<transport::TSocket> socket)
      : socket_(socket), reader_(std::make_shared<transport::TFramedTransport>(std::move(socket))) {}

  bool isOpen() const override { return socket_->isOpen(); }
  bool peek() override { return reader_->peek(); }
  void open() override { socket_->open(); }
  void close() override {
    pieces_.clear();
    small_.clear();
    socket_->close();
  }

  uint32_t read(uint8_t* buf, uint32_t len) { return reader_->read(buf, len); }
  uint32_t readAll(uint8_t* buf, uint32_t len) { return reader_->readAll(buf, len); }
  uint32_t readEnd() override { return reader_->readEnd(); }
  const uint8_t* borrow(uint8_t* buf, uint32_t* len) { return reader_->borrow(buf, len); }
  void consume(uint32_t len) { reader_->consume(len); }

  void write(const uint8_t* buf, uint32_t len) {
    if (len >= kGatherAtLeast) {
      pieces_.push_back(Piece{buf, 0, len});
    } else {
      if (pieces_.empty() || pieces_.back().external)
        pieces_.push_back(Piece{nullptr, small_.size(), 0});
      small_.append(reinterpret_cast<const char*>(buf), len);
      pieces_.back().size += len;
    }
    total_ += len;
  }

  void flush() override {
    struct Reset {
      GatherFramedTransport& t;
      ~Reset() {
        t.pieces_.clear();
        t.small_.clear();
        t.total_ = 0;
      }
    } reset{*this};
    if (total_ > static_cast<std::uint64_t>(INT32_MAX))
      throw transport::TTransportException(transport::TTransportException::CORRUPTED_DATA,
                                           "frame of " + std::to_string(total_) + " bytes is too large");
    const auto n = static_cast<std::uint32_t>(total_);
    const std::uint8_t prefix[4] = {static_cast<std::uint8_t>(n >> 24), static_cast<std::uint8_t>(n >> 16),
                                    static_cast<std::uint8_t>(n >> 8), static_cast<std::uint8_t>(n)};
    // The prefix goes out together with the first buffered piece, so small frames take one write.
    std::string head(reinterpret_cast<const char*>(prefix), sizeof prefix);
    std::size_t first = 0;
    if (!pieces_.empty() && !pieces_.front().external) {
      head.append(small_, 0, pieces_.front().size);
      first = 1;
    }
    socket_->write(reinterpret_cast<const std::uint8_t*>(head.data()), static_cast<std::uint32_t>(head.size()));
    for (std::size_t i = first; i < pieces_.size(); ++i) {
      const Piece& p = pieces_[i];
      const std::uint8_t* data =
          p.external ? p.external : reinterpret_cast<const std::uint8_t*>(small_.data()) + p.offset;
      socket_->write(data, p.size);
    }
  }

 private:
  static constexpr std::uint32_t kGatherAtLeast = 16 * 1024;
  struct Piece {
    const std::uint8_t* external;   // caller's bytes, or nullptr: bytes in small_ at offset
    std::size_t offset;
    std::uint32_t size;
  };
  std::shared_ptr<transport::TSocket> socket_;
  std::shared_ptr<transport::TFramedTransport> reader_;
  std::vector<Piece> pieces_;
  std::string small_;
  std::uint64_t total_ = 0;
};

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
      framed_ = std::make_shared<GatherFramedTransport>(socket_);
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
      // The gather transport keeps pointers into `data` until flush() writes them: within this call.
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
