#include "rpc/rendezvous_client.h"

#include <algorithm>

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include "core/clock.h"
#include "core/error.h"

namespace pw::rpc {

namespace transport = apache::thrift::transport;

namespace {

constexpr auto kRetryPause = std::chrono::milliseconds(50);
constexpr auto kReplySlack = std::chrono::milliseconds(2000);   // the server answers a timed-out wait itself
constexpr auto kReportTimeout = std::chrono::milliseconds(2000);

int millis_until(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 1, INT32_MAX));
}

}  // namespace

// One framed binary Thrift connection to the rendezvous service.
class RendezvousConnection {
 public:
  RendezvousConnection(const HostPort& master, const Tls& tls)
      : master_(master),
        socket_(make_client_socket(tls, master)),
        framed_(std::make_shared<transport::TFramedTransport>(socket_)),
        client_(std::make_shared<apache::thrift::protocol::TBinaryProtocol>(framed_)) {
    socket_->setNoDelay(true);
  }
  ~RendezvousConnection() {
    try {
      framed_->close();
    } catch (...) {
    }
  }
  bool is_open() const { return socket_->isOpen(); }
  void open(int timeout_ms) { open_client_socket(*socket_, master_, std::chrono::milliseconds(timeout_ms)); }
  void close() noexcept {
    try {
      framed_->close();
    } catch (...) {
    }
  }
  void set_timeout(int ms) {
    socket_->setRecvTimeout(ms);
    socket_->setSendTimeout(ms);
  }
  wire::RendezvousClient& client() { return client_; }

 private:
  HostPort master_;
  std::shared_ptr<transport::TSocket> socket_;
  std::shared_ptr<transport::TFramedTransport> framed_;
  wire::RendezvousClient client_;
};

RendezvousClient::RendezvousClient(HostPort master, std::string job_token, int rank, Tls tls)
    : master_(std::move(master)), token_(std::move(job_token)), rank_(rank), tls_(std::move(tls)),
      connection_(std::make_unique<RendezvousConnection>(master_, tls_)) {}

RendezvousClient::~RendezvousClient() = default;

// Runs `body(client, timeout_ms)`, connecting first (retrying refused connections until the
// deadline) and translating the service's answers into our error types.
template <typename Call>
auto RendezvousClient::call(const char* what, Deadline deadline, Call body) {
  std::lock_guard lock(mutex_);
  const std::string where = "rank " + std::to_string(rank_) + ": rendezvous at " + master_.str() + " (" + what + "): ";
  while (!connection_->is_open()) {
    try {
      connection_->open(std::min(millis_until(deadline), 2000));
    } catch (const TlsError& e) {
      throw TlsError(where.substr(0, where.size() - 2), e.reason());
    } catch (const transport::TTransportException& e) {
      connection_->close();
      if (Clock::now() + kRetryPause >= deadline)
        throw TimeoutError(where + "cannot connect before the deadline: " + e.what());
      std::this_thread::sleep_for(kRetryPause);
    }
  }
  const int timeout_ms = millis_until(deadline);
  connection_->set_timeout(timeout_ms + static_cast<int>(kReplySlack.count()));
  try {
    return body(connection_->client(), timeout_ms);
  } catch (const wire::RendezvousFailed& e) {
    switch (e.code) {
      case wire::RendezvousError::JOB_FAILED: throw AbortedError("job stopped: " + e.reason);
      case wire::RendezvousError::TIMED_OUT: throw TimeoutError(where + e.reason);
      case wire::RendezvousError::WRONG_TOKEN:
        throw InputError(where + "refused this rank's job token: it is not the token rank 0 was started with; "
                                 "give every rank of the job the same PW_JOB_TOKEN");
      default: throw Error(where + "refused: " + e.reason);
    }
  } catch (const apache::thrift::TException& e) {
    connection_->close();
    throw Error(where + "lost the rendezvous service on rank 0 (stage 0): " + e.what());
  }
}

wire::JobLayout RendezvousClient::register_rank(const std::string& address, Deadline deadline) {
  return call("registering", deadline, [&](wire::RendezvousClient& c, int ms) {
    wire::JobLayout layout;
    c.register_rank(layout, token_, rank_, address, ms);
    return layout;
  });
}

void RendezvousClient::set(const std::string& key, const std::string& value) {
  call("setting a store key", Clock::now() + std::chrono::seconds(30),
       [&](wire::RendezvousClient& c, int) { c.store_set(token_, key, value); });
}

std::string RendezvousClient::get(const std::string& key, Deadline deadline) {
  return call("reading a store key", deadline, [&](wire::RendezvousClient& c, int ms) {
    std::string value;
    c.store_get(value, token_, key, ms);
    return value;
  });
}

void RendezvousClient::barrier(const std::string& name, Deadline deadline) {
  call("barrier", deadline, [&](wire::RendezvousClient& c, int ms) { c.barrier(token_, name, rank_, ms); });
}

void RendezvousClient::report_failure(const std::string& reason) noexcept {
  // A fresh connection: the shared one may be stuck in a barrier or broken.
  try {
    RendezvousConnection connection(master_, tls_);
    connection.open(static_cast<int>(kReportTimeout.count()));
    connection.set_timeout(static_cast<int>(kReportTimeout.count()));
    connection.client().report_failure(token_, rank_, reason);
  } catch (...) {
  }
}

void RendezvousClient::leave() {
  call("leaving", Clock::now() + std::chrono::seconds(10),
       [&](wire::RendezvousClient& c, int) { c.leave(token_, rank_); });
}

std::int64_t RendezvousClient::server_now_ns() {
  return call("reading the clock", Clock::now() + std::chrono::seconds(10),
              [&](wire::RendezvousClient& c, int) { return c.now_ns(token_); });
}

Heartbeat::Heartbeat(HostPort master, std::string job_token, int rank, std::chrono::milliseconds interval,
                     std::chrono::milliseconds timeout, std::function<void(const std::string&)> on_failure, Tls tls)
    : master_(std::move(master)), token_(std::move(job_token)), rank_(rank), interval_(interval), timeout_(timeout),
      on_failure_(std::move(on_failure)), connection_(std::make_unique<RendezvousConnection>(master_, tls)) {
  PW_INPUT_CHECK(interval_.count() > 0 && timeout_ > interval_,
                 "the heartbeat timeout (" << timeout_.count() << " ms) must exceed its interval (" << interval_.count()
                                           << " ms)");
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  stop();
  connection_->close();
}

void Heartbeat::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string Heartbeat::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void Heartbeat::loop() {
  auto last_answer = Clock::now();
  std::string last_error;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    std::string reason;
    try {
      if (!connection_->is_open()) connection_->open(static_cast<int>(timeout_.count()));
      connection_->set_timeout(static_cast<int>(timeout_.count()));
      std::string failure;
      connection_->client().heartbeat(failure, token_, rank_);
      last_answer = Clock::now();
      if (!failure.empty()) reason = failure;
    } catch (const wire::RendezvousFailed& e) {
      reason = "the rendezvous refused this rank's heartbeat: " + e.reason;
    } catch (const std::exception& e) {
      connection_->close();
      last_error = e.what();
      // A closed or refused connection means rank 0's process is gone; a silent one may be a
      // slow network, given until the heartbeat timeout.
      const auto* t = dynamic_cast<const transport::TTransportException*>(&e);
      const bool gone = t != nullptr && t->getType() != transport::TTransportException::TIMED_OUT;
      if (gone || Clock::now() - last_answer > timeout_)
        reason = "rank 0 (stage 0) was lost: its rendezvous service at " + master_.str() + " stopped answering (" +
                 last_error + ")";
    }
    lock.lock();
    if (!reason.empty() && !stopping_) {
      failure_ = reason;
      lock.unlock();
      on_failure_(reason);
      lock.lock();
      break;
    }
    wake_.wait_for(lock, interval_, [&] { return stopping_; });
  }
}

}  // namespace pw::rpc
