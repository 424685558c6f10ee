#include "tools/prof/hang_analysis.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <signal.h>

#include <cerrno>

#include <nlohmann/json.hpp>

#include "core/input_file.h"
#include "core/error.h"
#include "core/json_text.h"
#include "pipeline/flight_live_file.h"

namespace pw::tools {
namespace {

using pipeline::FlightEntry;
using pipeline::FlightState;
using pipeline::OpType;

bool is_receive(OpType op) { return op == OpType::RecvActivation || op == OpType::RecvGradient; }
bool is_send(OpType op) { return op == OpType::SendActivation || op == OpType::SendGradient; }
OpType send_for(OpType receive) {
  return receive == OpType::RecvActivation ? OpType::SendActivation : OpType::SendGradient;
}

std::string text(const RankFlightRecord& r, const pipeline::Instruction& in) {
  return "'" + pipeline::instruction_text(in, r.chunks) + "'";
}

std::string who(const RankFlightRecord& r) {
  return "rank " + std::to_string(r.rank) + " (stage " + std::to_string(r.stage) + ", replica " +
         std::to_string(r.replica) + ")";
}

std::string where(const RankFlightRecord& r, const FlightEntry& e) {
  std::ostringstream out;
  out << text(r, e.instruction) << " (instruction " << e.index << " of step " << e.step;
  if (e.instruction.micro_batch >= 0) out << ", micro-batch " << e.instruction.micro_batch;
  out << ")";
  return out.str();
}

double seconds(std::int64_t ns) { return static_cast<double>(ns) / 1e9; }

std::string message_name(const FlightEntry& e) {
  std::ostringstream out;
  out << (e.instruction.op == OpType::RecvActivation || e.instruction.op == OpType::SendActivation ? "activation"
                                                                                                    : "gradient")
      << " of micro-batch " << e.instruction.micro_batch << " (step " << e.step << ")";
  return out.str();
}

const FlightEntry* last_entry(const RankFlightRecord& r) { return r.entries.empty() ? nullptr : &r.entries.back(); }

bool gone(const RankFlightRecord& r) { return r.source == RecordSource::LiveProcessGone; }
// Whether q's process ended while r's went on (ranks of one killed process stopped together: their
// records say where each was).
bool died_apart(const RankFlightRecord& r, const RankFlightRecord& q) { return gone(q) && (!gone(r) || r.pid != q.pid); }

// "its process (pid 12) ended without a dump (killed or crashed)" for a rank whose live file is all that is left.
std::string gone_text(const RankFlightRecord& r) {
  return "its process (pid " + std::to_string(r.pid) + ") ended without a dump (killed or crashed)";
}

// The waiting receive a rank stopped in, if it stopped in one.
const FlightEntry* waiting_receive(const RankFlightRecord& r) {
  const auto* e = last_entry(r);
  return e && is_receive(e->instruction.op) && e->state != FlightState::Done ? e : nullptr;
}

struct Finder {
  std::map<int, const RankFlightRecord*> by_rank;

  const RankFlightRecord* peer_of(const RankFlightRecord& r, const FlightEntry& e) const {
    const int rank = r.replica * r.stages + e.peer_stage;
    const auto it = by_rank.find(rank);
    return it == by_rank.end() ? nullptr : it->second;
  }
  int peer_rank(const RankFlightRecord& r, const FlightEntry& e) const { return r.replica * r.stages + e.peer_stage; }

  // Why the message `wait` of `r` never came from its peer.
  std::string why_missing(const RankFlightRecord& r, const FlightEntry& wait) const {
    const auto* q = peer_of(r, wait);
    const int q_rank = peer_rank(r, wait);
    if (!q) return "rank " + std::to_string(q_rank) + " left no flight record (did its process die?)";
    if (died_apart(r, *q)) {
      const auto* q_last = last_entry(*q);
      return who(*q) + ": " + gone_text(*q) +
             (q_last ? "; its live record ends in " + where(*q, *q_last) + ", " + pipeline::flight_state_name(q_last->state)
                     : "; its live record holds no instruction");
    }
    const OpType send = send_for(wait.instruction.op);
    for (const auto& e : q->entries)
      if (e.step == wait.step && e.instruction.op == send && e.instruction.micro_batch == wait.instruction.micro_batch &&
          e.message_virtual_stage == wait.message_virtual_stage) {
        if (e.state == FlightState::Done)
          return who(*q) + " sent it at " + where(*q, e) + ", but it never arrived (lost between the two ranks)";
        return who(*q) + " was sending it: " + where(*q, e) + " " + pipeline::flight_state_name(e.state);
      }
    // Where in the peer's program the send is, if it is there at all: the sender's virtual stage is
    // the receiver's minus one (activations) or plus one (gradients), its chunk that over P.
    const int sender_virtual =
        wait.message_virtual_stage + (wait.instruction.op == OpType::RecvActivation ? -1 : 1);
    const int sender_chunk = q->chunks > 1 ? sender_virtual / q->stages : 0;
    std::optional<std::size_t> at;
    for (std::size_t i = 0; i < q->program.size(); ++i) {
      const auto& in = q->program[i];
      if (in.op == send && in.micro_batch == wait.instruction.micro_batch && in.chunk == sender_chunk) {
        at = i;
        break;
      }
    }
    const auto* q_last = last_entry(*q);
    std::string now = "no instruction recorded";
    if (q_last) {
      now = q_last->state == FlightState::Done ? "done with " + where(*q, *q_last)
            : is_receive(q_last->instruction.op) ? "itself waiting in " + where(*q, *q_last)
                                                 : "still computing " + where(*q, *q_last) + " for " +
                                                       format_seconds(q->dumped_ns - q_last->start_ns);
    }
    if (!at) return who(*q) + "'s program has no " + pipeline::instruction_text({send, wait.instruction.micro_batch, sender_chunk}, q->chunks) +
                    " at all (a send/receive mismatch); it was " + now;
    if (q_last && q_last->step < wait.step)
      return who(*q) + " was still in step " + std::to_string(q_last->step) + ", " + now + "; it sends it only later";
    if (q_last && q_last->step == wait.step && q_last->index < static_cast<int>(*at))
      return who(*q) + " sends it only at instruction " + std::to_string(*at) + " " +
             text(*q, q->program[*at]) + " of its program, and was " + now;
    return who(*q) + " never sent it; it was " + now;
  }

  static std::string format_seconds(std::int64_t ns) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f s", seconds(ns));
    return buf;
  }
};

nlohmann::json read_json(const std::filesystem::path& path) {
  const std::string text = read_whole(path.string(), "flight record", std::int64_t{1} << 30);   // plain, not blocking
  try {
    check_json_depth(text, path.string() + ": not a flight record");   // before parsing (core/json_text.h)
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path.string() + ": not a flight record (" + e.what() + ")");
  }
}

// A record's rank, stage and replica agree with its job's shape (InputError if not).
void check_place(const RankFlightRecord& r) {
  PW_INPUT_CHECK(r.stages >= 1 && r.replicas >= 1 && r.chunks >= 1 && r.stage >= 0 && r.stage < r.stages &&
                     r.rank == r.replica * r.stages + r.stage,
                 "rank " << r.rank << ", stage " << r.stage << ", replica " << r.replica << " of " << r.stages
                         << " stages do not agree");
}

// On this host: whether process `pid` runs (kill(pid, 0) fails with EPERM for another user's
// process, and succeeds for a zombie, which is gone).
bool process_running(std::int64_t pid) {
  if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM)) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;   // no /proc: kill said it is there
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

RankFlightRecord read_live_record(const std::filesystem::path& path) {
  const auto live = pipeline::read_flight_live_file(path.string());
  RankFlightRecord r;
  r.file = path.string();
  r.pid = live.pid;
  r.rank = live.identity.rank;
  r.stage = live.identity.stage;
  r.replica = live.identity.replica;
  r.stages = live.identity.stages;
  r.replicas = live.identity.replicas;
  r.chunks = live.identity.chunks;
  r.dumped_ns = live.alive_ns;
  r.entries = live.entries;
  if (live.host != pipeline::flight_host_name()) {
    r.source = RecordSource::LiveOtherHost;
    r.reason = "live record from host " + live.host + " (pid " + std::to_string(live.pid) + ")";
  } else if (process_running(live.pid)) {
    r.source = RecordSource::LiveProcessRunning;
    r.reason = "live record of a running process (pid " + std::to_string(live.pid) + ")";
  } else {
    r.source = RecordSource::LiveProcessGone;
    r.reason = "live record: " + gone_text(r);
  }
  try {
    check_place(r);
    r.program = pipeline::from_text(live.identity.program);
  } catch (const InputError& e) {
    throw InputError(r.file + ": " + e.what());
  }
  return r;
}

}  // namespace

std::vector<RankFlightRecord> read_flight_records(const std::string& dir) {
  PW_INPUT_CHECK(std::filesystem::is_directory(dir), "--hang " << dir << ": not a folder");
  std::vector<RankFlightRecord> out;
  std::vector<RankFlightRecord> live;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("flight-rank", 0) != 0) continue;
    if (entry.path().extension() == ".live") {
      try {
        live.push_back(read_live_record(entry.path()));
      } catch (const InputError&) {
        // A rank's dump makes a damaged live file of it (another build's, cut short) not needed.
        const auto dump = entry.path().parent_path() / (entry.path().stem().string() + ".json");
        if (!std::filesystem::exists(dump)) throw;
      }
      continue;
    }
    if (entry.path().extension() != ".json") continue;
    const auto j = read_json(entry.path());
    RankFlightRecord r;
    r.file = entry.path().string();
    try {
      PW_INPUT_CHECK(j.value("format", "") == "pipewright flight record 1", "not a pipewright flight record");
      r.rank = j.at("rank").get<int>();
      r.stage = j.at("stage").get<int>();
      r.replica = j.at("replica").get<int>();
      r.stages = j.at("stages").get<int>();
      r.replicas = j.at("replicas").get<int>();
      r.chunks = j.at("chunks").get<int>();
      check_place(r);
      r.reason = j.at("reason").get<std::string>();
      r.pid = j.value("pid", std::int64_t{0});
      r.dumped_ns = j.at("dumped_ns").get<std::int64_t>();
      r.program = pipeline::from_text(j.at("program").get<std::string>());
      for (const auto& e : j.at("entries")) r.entries.push_back(pipeline::flight_entry_from_json(e));
    } catch (const nlohmann::json::exception& e) {
      throw InputError(r.file + ": " + e.what());
    } catch (const InputError& e) {
      throw InputError(r.file + ": " + e.what());
    }
    out.push_back(std::move(r));
  }
  // A rank with both: from one process, the live record where that process still runs and has
  // recorded more since its dump (SIGUSR1 dumps and the job goes on), else the dump (SIGTERM and a
  // failed job dump as the process ends); from two processes (the rank was restarted), the newer.
  const auto newest = [](const RankFlightRecord& r) { return r.entries.empty() ? 0 : r.entries.back().sequence + 1; };
  for (auto& l : live) {
    const auto same = std::find_if(out.begin(), out.end(), [&](const auto& d) { return d.rank == l.rank; });
    if (same == out.end()) out.push_back(std::move(l));
    else if (same->pid == l.pid ? l.source == RecordSource::LiveProcessRunning && newest(l) > newest(*same)
                                : same->dumped_ns < l.dumped_ns)
      *same = std::move(l);
  }
  PW_INPUT_CHECK(!out.empty(), "--hang " << dir << ": no flight-rank*.json or flight-rank*.live in it (train --debug-dir writes them)");
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return out;
}

HangDiagnosis diagnose_hang(const std::vector<RankFlightRecord>& records) {
  Finder f;
  for (const auto& r : records) f.by_rank[r.rank] = &r;
  HangDiagnosis d;
  for (const auto& r : records) {
    const auto* e = last_entry(r);
    std::string line = who(r) + ": ";
    if (!e) line += "no instruction recorded";
    else if (const auto* wait = waiting_receive(r))
      line += "waited " + Finder::format_seconds(r.dumped_ns - wait->start_ns) + " in " + where(r, *wait) +
              " for the " + message_name(*wait) + " from rank " + std::to_string(f.peer_rank(r, *wait));
    else if (e->state == FlightState::Running)
      line += "computing " + where(r, *e) + " for " + Finder::format_seconds(r.dumped_ns - e->start_ns);
    else if (e->state == FlightState::Failed)
      line += "failed in " + where(r, *e);
    else
      line += "between instructions, after " + where(r, *e);
    if (r.source != RecordSource::Dump) line += " [" + r.reason + "]";
    d.ranks.push_back(line);
  }
  // The root cause: follow who waits for whom from the first waiting rank.
  for (const auto& r : records) {
    const auto* wait = waiting_receive(r);
    if (!wait) continue;
    std::vector<int> chain{r.rank};
    const RankFlightRecord* at = &r;
    const FlightEntry* at_wait = wait;
    for (;;) {
      const auto* q = f.peer_of(*at, *at_wait);
      const FlightEntry* q_wait = q && !died_apart(*at, *q) ? waiting_receive(*q) : nullptr;
      if (!q || !q_wait || std::find(chain.begin(), chain.end(), q->rank) != chain.end()) {
        std::ostringstream out;
        if (q && q_wait) {   // a cycle: each waits for a message the next sends only later
          const auto start = std::find(chain.begin(), chain.end(), q->rank);
          out << "deadlock: ranks ";
          for (auto it = start; it != chain.end(); ++it) out << *it << " -> ";
          out << q->rank << " wait for each other (their programs send and receive in orders that do not match).";
          for (auto it = start; it != chain.end(); ++it) {
            const auto& link = *f.by_rank.at(*it);
            const auto& link_wait = *waiting_receive(link);
            out << " " << who(link) << " waits in " << where(link, link_wait) << " for the "
                << message_name(link_wait) << "; " << f.why_missing(link, link_wait) << ".";
          }
        } else {
          out << who(*at) << " waited in " << where(*at, *at_wait) << " for the " << message_name(*at_wait)
              << " from rank " << f.peer_rank(*at, *at_wait) << ": " << f.why_missing(*at, *at_wait);
        }
        d.stuck = out.str();
        break;
      }
      chain.push_back(q->rank);
      at = q;
      at_wait = q_wait;
    }
    break;
  }
  if (d.stuck.empty()) {
    for (const auto& r : records)
      if (const auto* e = last_entry(r); e && e->state == FlightState::Running) {
        d.stuck = who(r) + " was still computing " + where(r, *e);
        break;
      }
  }
  if (d.stuck.empty()) d.stuck = "no rank was waiting for another or computing when the records were written";
  return d;
}

std::string format_hang(const HangDiagnosis& d) {
  std::string out = "stuck: " + d.stuck + "\n";
  for (const auto& line : d.ranks) out += "  " + line + "\n";
  return out;
}

}  // namespace pw::tools
