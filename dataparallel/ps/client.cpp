#include "dataparallel/ps/client.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include <thrift/TApplicationException.h>
#include <thrift/TConfiguration.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include "core/error.h"
#include "dataparallel/ps/client_wire.h"
#include "dataparallel/ps/limits.h"
#include "pw_thrift/ParameterServer.h"
#include "rpc/streaming_framed_transport.h"
#include "rpc/transport.h"

namespace pw::dp {

namespace transport = apache::thrift::transport;

constexpr auto kRetryPause = std::chrono::milliseconds(200);
// How long the socket waits beyond a call's own deadline: the server answers a timed-out wait
// itself, and a checkpoint or restore still has its files to write or read after the wait.
constexpr auto kAnswerSlack = std::chrono::milliseconds(2000);
constexpr auto kFileWorkSlack = std::chrono::minutes(10);

// What a failed attempt met, in words (Thrift's for a socket timeout are the operating system's:
// "THRIFT_EAGAIN (timed out)", "Resource temporarily unavailable").
std::string plain_transport_error(const apache::thrift::TException& e) {
  if (const auto* t = dynamic_cast<const transport::TTransportException*>(&e)) {
    switch (t->getType()) {
      case transport::TTransportException::TIMED_OUT: return "the server did not answer in time";
      case transport::TTransportException::END_OF_FILE: return "the server closed the connection";
      case transport::TTransportException::NOT_OPEN: return std::string("could not connect: ") + e.what();
      default: break;
    }
  }
  return e.what();
}

// One framed connection to a shard, opened on first use and after a failure.
class PsConnection {
 public:
  PsConnection(rpc::HostPort address, int shard, rpc::Tls tls)
      : address_(std::move(address)), shard_(shard), tls_(std::move(tls)) {}
  const rpc::HostPort& address() const { return address_; }

  // A lost connection (a restarted server) is opened again and the call retried until `timeout`
  // has passed: pulls are idempotent, and a server that logged a push before it died takes the
  // retried copy as already done.
  template <typename Body>
  auto call(const std::string& what, std::chrono::milliseconds timeout, Body body,
            std::chrono::milliseconds slack = kAnswerSlack) {
    std::lock_guard lock(mutex_);
    const std::string where = "parameter server shard " + std::to_string(shard_) + " at " + address_.str() + " (" +
                              what + "): ";
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int attempt = 0;; ++attempt) {
      const auto left = std::max<std::int64_t>(
          1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
      throw_if_aborted(where);
      try {
        if (!socket_ || !socket_->isOpen()) {
          // The same frame limit as the server's: answers of a chunk are far below it. Rows are read
          // from the socket straight into the answer (no frame-sized buffer in between).
          auto config = std::make_shared<apache::thrift::TConfiguration>(static_cast<int>(kPsMaxFrameBytes),
                                                                         static_cast<int>(kPsMaxFrameBytes));
          socket_ = rpc::make_client_socket(tls_, address_);
          socket_->setNoDelay(true);
          framed_ = std::make_shared<rpc::StreamingFramedTransport>(socket_, config);
          client_ = std::make_unique<rpc::wire::ParameterServerClient>(
              std::make_shared<apache::thrift::protocol::TBinaryProtocol>(framed_));
          try {
            rpc::open_client_socket(*socket_, address_, std::chrono::milliseconds(std::min<std::int64_t>(left, 10000)));
          } catch (const rpc::TlsError& e) {
            socket_.reset();
            throw rpc::TlsError(where.substr(0, where.size() - 2), e.reason());
          }
          std::lock_guard fd_lock(fd_mutex_);
          fd_ = socket_->getSocketFD();
          if (aborted_) ::shutdown(fd_, SHUT_RDWR);   // aborted while it connected
        }
        const auto socket_ms = static_cast<int>(std::min<std::int64_t>(left + slack.count(), std::numeric_limits<int>::max()));
        socket_->setRecvTimeout(socket_ms);
        socket_->setSendTimeout(socket_ms);
        return body(*client_, static_cast<int>(left));
      } catch (const rpc::wire::PsError& e) {
        if (e.code == rpc::wire::PsErrorCode::TIMED_OUT) throw rpc::TimeoutError(where + e.reason);
        if (e.code == rpc::wire::PsErrorCode::FAILED) throw Error(where + e.reason);
        throw InputError(where + e.reason);
      } catch (const apache::thrift::TApplicationException& e) {
        // The server answered but does not know the call (an older pipewright): no retry helps.
        close();
        throw Error(where + "the server does not serve this call (" + e.what() +
                    "); are the servers of another pipewright version?");
      } catch (const apache::thrift::TException& e) {
        close();
        throw_if_aborted(where);
        if (std::chrono::steady_clock::now() + kRetryPause >= deadline)
          throw rpc::TimeoutError(where + "no answer within the timeout of " + std::to_string(timeout.count()) +
                                  " ms (" + std::to_string(attempt + 1) + " attempts; the last: " +
                                  plain_transport_error(e) + ")");
        std::this_thread::sleep_for(kRetryPause);
      } catch (...) {   // e.g. bad_alloc part-way through an answer: the rest of its frame is still unread
        close();
        throw;
      }
    }
  }

  // From any thread: the call under way fails at once (its socket is shut down), and so does
  // every later one, with AbortedError naming `why`; nothing is retried.
  void abort(const std::string& why) noexcept {
    std::lock_guard fd_lock(fd_mutex_);
    if (aborted_) return;
    why_ = why;
    aborted_ = true;
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }

 private:
  void throw_if_aborted(const std::string& where) {
    std::lock_guard fd_lock(fd_mutex_);
    if (aborted_) throw rpc::AbortedError(where + why_);
  }
  void close() noexcept {
    {
      std::lock_guard fd_lock(fd_mutex_);
      fd_ = -1;
    }
    try {
      if (framed_) framed_->close();
    } catch (...) {
    }
    socket_.reset();
  }
  rpc::HostPort address_;
  int shard_;
  rpc::Tls tls_;
  std::mutex fd_mutex_;   // fd_, aborted_ and why_: abort() comes from another thread
  int fd_ = -1;           // the open socket's, for abort()
  bool aborted_ = false;
  std::string why_;
  std::mutex mutex_;
  std::shared_ptr<transport::TSocket> socket_;
  std::shared_ptr<transport::TTransport> framed_;
  std::unique_ptr<rpc::wire::ParameterServerClient> client_;
};

PsClient::PsClient(std::vector<rpc::HostPort> shards, std::string job_token, int worker,
                   std::chrono::milliseconds timeout, rpc::Tls tls)
    : token_(std::move(job_token)), worker_(worker), timeout_(timeout) {
  PW_INPUT_CHECK(!shards.empty(), "a parameter-server client needs at least one shard address");
  for (std::size_t i = 0; i < shards.size(); ++i) {
    auto& pool = pools_.emplace_back();
    for (int c = 0; c < kPsConnectionsPerShard; ++c)   // opened on first use
      pool.push_back(std::make_unique<PsConnection>(shards[i], static_cast<int>(i), tls));
  }
}

PsClient::~PsClient() = default;

void PsClient::abort(const std::string& why) noexcept {
  for (auto& pool : pools_)
    for (auto& connection : pool) connection->abort(why);
}

std::int64_t PsClient::next_push_id() {
  // Random per client (a restarted worker never reuses its predecessor's ids), then counting.
  static thread_local std::mt19937_64 rng(std::random_device{}());
  std::lock_guard lock(push_id_mutex_);
  if (push_id_ == 0) push_id_ = static_cast<std::int64_t>(rng() >> 1) | 1;
  return ++push_id_;
}

// Runs call(shard) for every shard at once; rethrows the first failure.
template <typename Call>
void PsClient::on_every_shard(const char*, Call call) {
  const int n = shards();
  if (n == 1) return call(0);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::jthread> threads;   // joined on every way out, a failed start included
  for (int s = 0; s < n; ++s)
    threads.emplace_back([&, s] {
      try {
        call(s);
      } catch (...) {
        errors[static_cast<std::size_t>(s)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

template <typename Body>
void PsClient::on_chunks(int shard, std::size_t chunks, Body body) {
  auto& pool = pools_[static_cast<std::size_t>(shard)];
  const std::size_t lanes = std::min<std::size_t>(chunks, pool.size());
  if (lanes <= 1) {
    for (std::size_t i = 0; i < chunks; ++i) body(*pool.front(), i);
    return;
  }
  std::vector<std::exception_ptr> errors(lanes);
  std::vector<std::jthread> threads;   // joined on every way out, a failed start included
  for (std::size_t lane = 0; lane < lanes; ++lane)
    threads.emplace_back([&, lane] {
      try {
        for (std::size_t i = lane; i < chunks; i += lanes) body(*pool[lane], i);
      } catch (...) {
        errors[lane] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void PsClient::create_table(const TableConfig& c) {
  check_table_config(c);
  rpc::wire::TableSpec spec;
  spec.name = c.name;
  spec.dim = c.dim;
  spec.optimizer = static_cast<int>(c.optimizer);
  spec.lr = c.lr;
  spec.init_seed = static_cast<std::int64_t>(c.init_seed);
  spec.init_scale = c.init_scale;
  spec.admit_after = c.bounds.admit_after;
  spec.max_rows = c.bounds.max_rows;
  spec.row_ttl = c.bounds.row_ttl;
  on_every_shard("create_table", [&](int s) {
    control(s).call("create_table", timeout_,
                                                    [&](rpc::wire::ParameterServerClient& client, int) {
                                                      client.create_table(token_, spec);
                                                    });
  });
}

std::vector<float> PsClient::pull(const std::string& table, int dim, const std::vector<std::int64_t>& keys,
                                  std::int64_t step, int staleness) {
  std::vector<float> rows(keys.size() * static_cast<std::size_t>(dim));
  pull(table, dim, keys, step, staleness, rows.data());
  return rows;
}

void PsClient::pull(const std::string& table, int dim, const std::vector<std::int64_t>& keys, std::int64_t step,
                    int staleness, float* rows) {
  const int n = shards();
  std::vector<std::vector<std::int64_t>> per(static_cast<std::size_t>(n));
  std::vector<std::vector<std::size_t>> where(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto s = static_cast<std::size_t>(shard_of(keys[i], n));
    per[s].push_back(keys[i]);
    where[s].push_back(i);
  }
  const auto d = static_cast<std::size_t>(dim);
  on_every_shard("pull", [&](int s) {
    const auto u = static_cast<std::size_t>(s);
    const std::size_t n = per[u].size();
    if (n == 0) return;   // nothing to ask this shard (and no reason to wait for its step)
    const std::size_t chunks = ps_pull_chunks(n, dim);
    on_chunks(s, chunks, [&](PsConnection& connection, std::size_t chunk) {
      const auto [begin, end] = ps_chunk(chunk, chunks, n);
      connection.call("pull of step " + std::to_string(step), timeout_, [&](rpc::wire::ParameterServerClient& client, int ms) {
        send_pull(*client.getOutputProtocol(), PullCall{token_, table, per[u].data() + begin, end - begin, step, staleness, ms});
        // A retry after a broken answer writes the same rows again.
        read_pull_answer(*client.getInputProtocol(), d * sizeof(float), end - begin,
                         [&](std::size_t first, std::size_t count, const char* data) {
                           for (std::size_t k = 0; k < count; ++k)
                             std::memcpy(rows + where[u][begin + first + k] * d, data + k * d * sizeof(float),
                                         d * sizeof(float));
                         });
      });
    });
  });
}

void PsClient::push(const std::string& table, int dim, const std::vector<std::int64_t>& keys,
                    const std::vector<float>& grads, std::int64_t step, std::optional<int> worker) {
  const auto d = static_cast<std::size_t>(dim);
  PW_INPUT_CHECK(grads.size() == keys.size() * d, "push of " << keys.size() << " keys of width " << dim << " with "
                                                             << grads.size() << " gradient values");
  const int n = shards();
  std::vector<std::vector<std::int64_t>> per(static_cast<std::size_t>(n));
  std::vector<std::vector<std::size_t>> where(static_cast<std::size_t>(n));   // each key's row in `grads`
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto s = static_cast<std::size_t>(shard_of(keys[i], n));
    per[s].push_back(keys[i]);
    where[s].push_back(i);
  }
  // Every shard hears of every step, with or without keys, so each can count the workers' steps; a
  // shard's keys go in parts (ps_push_parts), which the shard counts as one push.
  const std::int64_t push_id = next_push_id();   // the same for every part and retry of this push
  on_every_shard("push", [&](int s) {
    const auto u = static_cast<std::size_t>(s);
    const std::size_t n = per[u].size();
    const std::size_t parts = ps_push_parts(n, dim);
    PW_CHECK(parts <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), "push of " << n << " keys");
    on_chunks(s, parts, [&](PsConnection& connection, std::size_t part) {
      const auto [begin, end] = ps_chunk(part, parts, n);
      const PushCall call{token_,       table, worker.value_or(worker_), step, per[u], grads.data(), d, where[u], begin,
                          end,          static_cast<std::int32_t>(part), static_cast<std::int32_t>(parts), push_id};
      connection.call("push of step " + std::to_string(step), timeout_, [&](rpc::wire::ParameterServerClient& client, int) {
        send_push(*client.getOutputProtocol(), call);
        client.recv_push();
      });
    });
  });
}

std::vector<PsClient::ShardReport> PsClient::stats(const std::string& table) {
  std::vector<ShardReport> out(static_cast<std::size_t>(shards()));
  on_every_shard("stats", [&](int s) {
    rpc::wire::ShardStats st;
    control(s).call("stats", timeout_, [&](rpc::wire::ParameterServerClient& c, int) {
      c.stats(st, token_, table);
    });
    out[static_cast<std::size_t>(s)] = {st.rows,       st.pulls,        st.pushes,    st.applied_through,
                                        st.max_pull_staleness, st.admissions, st.dropped_rows, st.evictions,
                                        st.expirations, st.peak_rows, st.last_pushed};
  });
  return out;
}

void PsClient::check_identities(int workers, UpdateMode mode) {
  std::vector<rpc::wire::ShardIdentity> ids(static_cast<std::size_t>(shards()));
  on_every_shard("identity", [&](int s) {
    control(s).call("identity", timeout_, [&](rpc::wire::ParameterServerClient& c, int) {
      c.identity(ids[static_cast<std::size_t>(s)], token_);
    });
  });
  for (int s = 0; s < shards(); ++s) {
    const auto& id = ids[static_cast<std::size_t>(s)];
    const std::string where = "the parameter server at " + control(s).address().str();
    PW_INPUT_CHECK(id.shards == shards(), where << " was started as one of " << id.shards << " shards, but the job gives "
                                                << shards() << " server address(es); give every shard's address once");
    PW_INPUT_CHECK(id.shard == s, where << " was started as shard " << id.shard << " of " << id.shards
                                        << ", but the job lists it as shard " << s
                                        << "; give the addresses in shard order, each once");
    PW_INPUT_CHECK(id.workers == workers, where << " was started for " << id.workers << " worker(s), but the job has "
                                                << workers << " replica(s)");
    PW_INPUT_CHECK(id.mode == update_mode_name(mode), where << " runs " << id.mode << " updates, but the job asks for "
                                                            << update_mode_name(mode) << " (/ps/mode)");
  }
}

void PsClient::claim(const std::string& job_id, ClaimMode mode) {
  on_every_shard("claim", [&](int s) {
    control(s).call("claim", timeout_, [&](rpc::wire::ParameterServerClient& c, int) {
      c.claim(token_, job_id, mode == ClaimMode::TakeOver);
    });
  });
}

std::vector<PsCheckpointFile> PsClient::checkpoint(const std::string& folder, std::int64_t step) {
  std::vector<std::vector<PsCheckpointFile>> per(static_cast<std::size_t>(shards()));
  on_every_shard("checkpoint", [&](int s) {
    std::vector<rpc::wire::PsCheckpointFile> files;
    control(s).call(
        "checkpoint", timeout_,
        [&](rpc::wire::ParameterServerClient& c, int ms) { c.checkpoint(files, token_, folder, step, ms); },
        kFileWorkSlack);
    for (auto& f : files) per[static_cast<std::size_t>(s)].push_back({f.path, f.bytes, f.checksum});
  });
  std::vector<PsCheckpointFile> all;
  for (auto& files : per) all.insert(all.end(), files.begin(), files.end());
  return all;
}

void PsClient::restore(const std::string& folder) {
  // Every shard checks its part first, so a checkpoint one shard refuses changes no shard.
  for (const bool check_only : {true, false})
    on_every_shard("restore", [&](int s) {
      control(s).call(
          "restore", timeout_,
          [&](rpc::wire::ParameterServerClient& c, int) { c.restore(token_, folder, check_only); }, kFileWorkSlack);
    });
}

}  // namespace pw::dp
