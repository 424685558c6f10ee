#include "train/launcher/node_agent.h"

#include <algorithm>
#include <cstdio>

#include "pipewright/job_config.h"
#include "rpc/launch_env.h"
#include "rpc/rendezvous_client.h"
#include "rpc/rendezvous_server.h"
#include "rpc/transport.h"
#include "train/launcher/stop_signals.h"

namespace pw::launcher {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
// The heartbeats of the launchers to node 0's, and how long the last one waits for the others to leave.
constexpr auto kAgentBeat = milliseconds(500);
constexpr auto kAgentSilence = milliseconds(30000);
constexpr auto kAgentLeaveWait = milliseconds(10000);

std::string one_line(std::string text) {
  std::replace_if(text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return text;
}

// A store value: "<kind> <exit code>\n<cause>\n<summary>" (kind: an Outcome's or a Decision's).
struct Message {
  int kind = 0, exit_code = 0;
  std::string cause, summary;
};

std::string encode(const Message& m) {
  return std::to_string(m.kind) + " " + std::to_string(m.exit_code) + "\n" + one_line(m.cause) + "\n" +
         one_line(m.summary);
}

Message decode(const std::string& value) {
  Message m;
  const auto nl = value.find('\n');
  const auto nl2 = nl == std::string::npos ? std::string::npos : value.find('\n', nl + 1);
  if (nl2 == std::string::npos || std::sscanf(value.substr(0, nl).c_str(), "%d %d", &m.kind, &m.exit_code) != 2)
    throw CoordinationError("a malformed message between the launchers: '" + one_line(value) + "'");
  m.cause = value.substr(nl + 1, nl2 - nl - 1);
  m.summary = value.substr(nl2 + 1);
  return m;
}

}  // namespace

NodeAgent::NodeAgent(const rpc::HostPort& master, const std::string& token, int node, int nnodes, int max_restarts,
                     milliseconds timeout, std::function<int()> take_stop_request, rpc::Tls tls)
    : node_(node), nnodes_(nnodes), timeout_(timeout), take_stop_request_(std::move(take_stop_request)),
      tls_(std::move(tls)) {
  if (master.port >= 65535)
    throw train::ConfigError("/master", master.str() + ": with /max_restarts the launchers meet at port + 1; give a "
                                        "port below 65535");
  address_ = rpc::HostPort{master.host, master.port + 1};
  try {
    join(master, token, max_restarts);
  } catch (...) {
    // A constructor that throws runs no destructor: the others hear why from here.
    if (client_) client_->report_failure(goodbye_.empty() ? "its launcher ended" : goodbye_);
    throw;
  }
  heartbeat_ = std::make_unique<rpc::Heartbeat>(address_, token, node_, kAgentBeat, kAgentSilence,
                                                [this](const std::string& reason) {
                                                  std::lock_guard lock(mutex_);
                                                  lost_ = clean(reason);
                                                }, tls_);
}

void NodeAgent::join(const rpc::HostPort& master, const std::string& token, int max_restarts) {
  guarded("joining", [&] {
    if (node_ == 0)
      server_ = std::make_unique<rpc::RendezvousServer>(address_, rpc::RendezvousConfig{nnodes_, nnodes_, token, kAgentSilence, tls_});
    client_ = std::make_unique<rpc::RendezvousClient>(address_, token, node_, tls_);
    const auto deadline = Clock::now() + timeout_;
    const std::string late = "the launchers of the other nodes did not join within " + seconds_text() +
                             " (/node_timeout_seconds); start one on every node with the same /nnodes, /master, "
                             "/job_token and /max_restarts";
    if (node_ == 0) client_->set("max_restarts", std::to_string(max_restarts));
    const std::string me = rpc::HostPort{rpc::local_address_towards(master.host), address_.port}.str();
    patiently(deadline, late, [&](Clock::time_point by) { client_->register_rank(me, by); });
    if (node_ != 0) {
      std::string theirs;
      patiently(deadline, late, [&](Clock::time_point by) { theirs = client_->get("max_restarts", by); });
      if (theirs != std::to_string(max_restarts)) {
        const std::string why = "/max_restarts " + std::to_string(max_restarts) + " on node " + std::to_string(node_) +
                                " but " + theirs + " on node 0; give every node's launcher the same /max_restarts";
        client_->report_failure(why);
        throw InputError(why);
      }
    }
    patiently(deadline, late, [&](Clock::time_point by) { client_->barrier("joined", by); });
  });
}

NodeAgent::~NodeAgent() {
  if (left_ == Left::kNo && client_) client_->report_failure(goodbye_.empty() ? "its launcher ended" : goodbye_);
  heartbeat_.reset();
  client_.reset();
  server_.reset();
}

std::string NodeAgent::lost() const {
  std::lock_guard lock(mutex_);
  return lost_;
}

void NodeAgent::announce_failure(int attempt) {
  try {
    client_->set("failed/" + std::to_string(attempt), std::to_string(node_));
  } catch (const Error& e) {
    note_lost(e);
  }
}

bool NodeAgent::failure_announced(int attempt) {
  try {
    client_->get("failed/" + std::to_string(attempt), Clock::now());
    return true;
  } catch (const rpc::TimeoutError&) {
    return false;
  } catch (const Error& e) {
    note_lost(e);
    return false;
  }
}

std::optional<Decision> NodeAgent::finish(int attempt, const Outcome& mine, int max_restarts, int* stopped_by) {
  const std::string n = std::to_string(attempt);
  std::optional<Decision> decision;
  guarded("ending attempt " + n, [&] {
    client_->set("result/" + n + "/" + std::to_string(node_),
                 encode({static_cast<int>(mine.kind), mine.exit_code, mine.cause, mine.summary}));
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      try {
        client_->barrier("end/" + n, std::min(deadline, Clock::now() + std::chrono::seconds(1)));
        break;
      } catch (const rpc::TimeoutError&) {
        if ((*stopped_by = take_stop_request_()) != 0) return;
        if (Clock::now() >= deadline)
          throw CoordinationError("the launchers of the other nodes did not end attempt " + n + " within " +
                                  seconds_text() + " (/node_timeout_seconds)");
      }
    }
    if (node_ == 0) client_->set("decision/" + n, decide_for_all(attempt, max_restarts, deadline));
    const Message d = decode(client_->get("decision/" + n, Clock::now() + timeout_));
    decision = Decision{static_cast<Decision::Kind>(d.kind), d.cause, d.summary, d.exit_code};
  });
  return decision;
}

void NodeAgent::leave() noexcept {
  left_ = Left::kYes;
  heartbeat_->stop();
  try {
    client_->leave();
  } catch (...) {
  }
  if (server_) server_->wait_until_all_left(kAgentLeaveWait);
}

std::string NodeAgent::decide_for_all(int attempt, int max_restarts, Clock::time_point deadline) {
  const std::string n = std::to_string(attempt);
  std::vector<Outcome> results;
  for (int node = 0; node < nnodes_; ++node) {
    const Message m = decode(client_->get("result/" + n + "/" + std::to_string(node), deadline));
    results.push_back(Outcome{static_cast<Outcome::Kind>(m.kind), m.cause, m.summary, m.exit_code});
  }
  int announcer = -1;
  try {
    announcer = std::stoi(client_->get("failed/" + n, Clock::now()));
  } catch (const rpc::TimeoutError&) {
  } catch (const std::logic_error&) {
  }
  const Decision d = decide(combine_node_outcomes(results, announcer), attempt, max_restarts);
  return encode({static_cast<int>(d.kind), d.exit_code, d.cause, d.summary});
}

std::string NodeAgent::seconds_text() const { return std::to_string(timeout_.count() / 1000) + " s"; }

// Runs `call(by)` in waits of at most a second until it returns, so that a stop request is heard;
// CoordinationError saying `late` at the deadline.
void NodeAgent::patiently(Clock::time_point deadline, const std::string& late,
                          const std::function<void(Clock::time_point)>& call) {
  for (;;) {
    try {
      call(std::min(deadline, Clock::now() + std::chrono::seconds(1)));
      return;
    } catch (const rpc::TimeoutError&) {
      if (const int sig = take_stop_request_(); sig != 0) {
        goodbye_ = "got " + signal_name(sig);
        throw CoordinationError("got " + signal_name(sig) + " while waiting for the other nodes' launchers");
      }
      if (Clock::now() >= deadline) throw CoordinationError(late);
    }
  }
}

// "rank 1 (stage 1)" in the service's messages is node 1's launcher.
std::string NodeAgent::clean(std::string text) const {
  for (int r = 0; r < nnodes_; ++r) {
    const std::string from = "rank " + std::to_string(r) + " (stage " + std::to_string(r) + ")";
    const std::string to = "node " + std::to_string(r) + "'s launcher";
    for (std::size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), to);
  }
  const std::string me = "rank " + std::to_string(node_) + ": rendezvous at";
  if (text.rfind(me, 0) == 0) text.replace(0, me.size(), "node " + std::to_string(node_) + "'s launcher: rendezvous at");
  return one_line(text);
}

// The service's "job stopped: <why>" is <why> (another launcher failed or was lost); anything else
// is this launcher's trouble reaching the service.
std::string NodeAgent::reason_of(const Error& e) const {
  const std::string text = e.what(), stopped = "job stopped: ";
  if (dynamic_cast<const rpc::AbortedError*>(&e) != nullptr && text.rfind(stopped, 0) == 0)
    return clean(text.substr(stopped.size()));
  return "the launchers' rendezvous at " + address_.str() + " failed: " + clean(text);
}

void NodeAgent::note_lost(const Error& e) {
  std::lock_guard lock(mutex_);
  if (lost_.empty()) lost_ = reason_of(e);
}

void NodeAgent::guarded(const std::string& what, const std::function<void()>& body) {
  try {
    body();
  } catch (const InputError&) {
    throw;
  } catch (const CoordinationError&) {
    throw;
  } catch (const rpc::AbortedError& e) {
    throw CoordinationError(reason_of(e));
  } catch (const Error& e) {
    throw CoordinationError("node " + std::to_string(node_) + "'s launcher, " + what + " (launchers' rendezvous at " +
                            address_.str() + "): " + clean(e.what()));
  }
}

}  // namespace pw::launcher
