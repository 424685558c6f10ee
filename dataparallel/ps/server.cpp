#include "dataparallel/ps/server.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/durable_file.h"
#include "dataparallel/ps/limits.h"
#include "pw_thrift/ParameterServer.h"
#include "rpc/connection_gate.h"
#include "rpc/frame_check.h"
#include "rpc/job_token.h"
#include "rpc/thrift_server.h"

namespace pw::dp {

namespace {


[[noreturn]] void fail(const std::string& reason, rpc::wire::PsErrorCode::type code) {
  rpc::wire::PsError e;
  e.reason = reason;
  e.code = code;
  throw e;
}

class PsHandler : public rpc::wire::ParameterServerIf {
 public:
  PsHandler(std::shared_ptr<PsShard> shard, std::string token) : shard_(std::move(shard)), token_(std::move(token)) {}

  void create_table(const std::string& token, const rpc::wire::TableSpec& spec) override {
    guarded(token, [&] {
      TableConfig c;
      c.name = spec.name;
      c.dim = spec.dim;
      c.optimizer = static_cast<SparseOptimizerKind>(spec.optimizer);
      c.lr = spec.lr;
      c.init_seed = static_cast<std::uint64_t>(spec.init_seed);
      c.init_scale = spec.init_scale;
      c.bounds = {spec.admit_after, spec.max_rows, spec.row_ttl};
      shard_->create_table(c);
    });
  }

  void pull(std::string& out, const std::string& token, const std::string& table, const std::vector<int64_t>& keys,
            int64_t step, int32_t staleness, int32_t timeout_ms) override {
    guarded(token, [&] {
      last_training_call_ = std::chrono::steady_clock::now().time_since_epoch().count();
      // Rows go straight into the reply; a std::string's buffer is aligned for floats.
      shard_->pull(table, keys, step, staleness,
                   std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0)),
                   [&](std::size_t floats) {
                     out.resize(floats * sizeof(float));
                     return reinterpret_cast<float*>(out.data());
                   });
    });
  }

  void push(const std::string& token, const std::string& table, int32_t worker, int64_t step,
            const std::vector<int64_t>& keys, const std::string& grads, int32_t part, int32_t parts,
            int64_t push_id) override {
    guarded(token, [&] {
      last_training_call_ = std::chrono::steady_clock::now().time_since_epoch().count();
      if (grads.size() % sizeof(float) != 0)
        fail("gradients of " + std::to_string(grads.size()) + " bytes are not whole F32 values",
             rpc::wire::PsErrorCode::BAD_REQUEST);
      // The string's buffer comes from operator new, aligned for floats: read the values in place.
      shard_->push(table, worker, step, keys, reinterpret_cast<const float*>(grads.data()),
                   grads.size() / sizeof(float), part, parts, push_id);
    });
  }

  void stats(rpc::wire::ShardStats& out, const std::string& token, const std::string& table) override {
    guarded(token, [&] {
      const auto s = shard_->stats(table);
      out.rows = s.rows;
      out.pulls = s.pulls;
      out.pushes = s.pushes;
      out.applied_through = s.applied_through;
      out.max_pull_staleness = s.max_pull_staleness;
      out.last_pushed = s.last_pushed;
      out.admissions = s.admissions;
      out.dropped_rows = s.dropped_rows;
      out.evictions = s.evictions;
      out.expirations = s.expirations;
      out.peak_rows = s.peak_rows;
    });
  }

  void checkpoint(std::vector<rpc::wire::PsCheckpointFile>& out, const std::string& token, const std::string& folder,
                  int64_t step, int32_t timeout_ms) override {
    guarded(token, [&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
      for (const auto& f : shard_->checkpoint(folder, step, deadline)) {
        rpc::wire::PsCheckpointFile w;
        w.path = f.path;
        w.bytes = f.bytes;
        w.checksum = f.checksum;
        out.push_back(std::move(w));
      }
    });
  }

  void identity(rpc::wire::ShardIdentity& out, const std::string& token) override {
    guarded(token, [&] {
      const auto& c = shard_->config();
      out.shard = c.shard;
      out.shards = c.shards;
      out.workers = c.workers;
      out.mode = update_mode_name(c.mode);
    });
  }

  void claim(const std::string& token, const std::string& job_id, bool take_over) override {
    guarded(token, [&] {
      PW_INPUT_CHECK(!job_id.empty() && job_id.size() <= 256 && job_id.find('\n') == std::string::npos,
                     "a job identity of " << job_id.size() << " bytes; expected 1 to 256, one line");
      std::lock_guard lock(claim_mutex_);
      if (claimed_by_.empty()) claimed_by_ = read_claim();
      if (claimed_by_ == job_id) return;
      PW_INPUT_CHECK(claimed_by_.empty() || take_over,
                     "serves job " << claimed_by_ << " (its tables hold that job's rows), not job " << job_id
                                   << "; start fresh servers for a new job, or resume that job");
      // A resuming job takes the servers over only from a job that has stopped using them.
      const auto since = std::chrono::steady_clock::now().time_since_epoch() -
                         std::chrono::steady_clock::duration(last_training_call_.load());
      const auto quiet_ms = std::chrono::duration_cast<std::chrono::milliseconds>(since).count();
      PW_INPUT_CHECK(claimed_by_.empty() || last_training_call_.load() == 0 || since >= kQuietBeforeTakeOver,
                     "serves job " << claimed_by_ << ", which is still training on it (its last pull or push "
                                   << quiet_ms << " ms ago); stop that job before resuming another on these servers");
      claimed_by_ = job_id;
      if (!shard_->config().dir.empty()) write_file_durably(claim_path(), job_id + "\n");
    });
  }

  void restore(const std::string& token, const std::string& folder, bool check_only) override {
    guarded(token, [&] { shard_->restore(folder, check_only ? PsRestore::CheckOnly : PsRestore::Replace); });
  }

 private:
  template <typename Body>
  void guarded(const std::string& token, Body body) {
    if (!rpc::tokens_equal(token, token_)) {
      rpc::note_wrong_token();   // rate-limited per host (rpc/connection_gate.h)
      fail("wrong job token", rpc::wire::PsErrorCode::REFUSED);
    }
    rpc::mark_connection_proven();
    try {
      body();
    } catch (const rpc::wire::PsError&) {
      throw;
    } catch (const rpc::TimeoutError& e) {
      fail(e.what(), rpc::wire::PsErrorCode::TIMED_OUT);
    } catch (const InputError& e) {
      fail("shard " + std::to_string(shard_->config().shard) + ": " + e.what(), rpc::wire::PsErrorCode::BAD_REQUEST);
    } catch (const std::exception& e) {
      fail("shard " + std::to_string(shard_->config().shard) + ": " + e.what(), rpc::wire::PsErrorCode::FAILED);
    }
  }

  std::string claim_path() const { return (std::filesystem::path(shard_->config().dir) / "job-identity").string(); }
  std::string read_claim() const {
    if (shard_->config().dir.empty()) return {};
    std::ifstream in(claim_path());
    std::string id;
    std::getline(in, id);
    return id;
  }

  std::shared_ptr<PsShard> shard_;
  std::string token_;
  std::mutex claim_mutex_;
  std::string claimed_by_;   // the job identity these tables belong to; empty: none yet
  // The steady clock's count at the last pull or push (0: none yet).
  std::atomic<std::chrono::steady_clock::rep> last_training_call_{0};
  static constexpr auto kQuietBeforeTakeOver = std::chrono::seconds(5);
};

}  // namespace

PsServer::PsServer(const rpc::HostPort& bind, PsShardConfig config, std::string job_token, rpc::GateLimits gate,
                   rpc::Tls tls) {
  rpc::check_job_token(job_token, "the parameter server's job token");
  shard_ = std::make_shared<PsShard>(std::move(config));
  server_ = std::make_unique<rpc::ThriftServer>(
      bind, std::make_shared<rpc::wire::ParameterServerProcessor>(std::make_shared<PsHandler>(shard_, job_token)),
      kPsMaxFrameBytes, rpc::kDefaultMaxConnections, gate, std::move(tls));
}

PsServer::~PsServer() { server_.reset(); }

rpc::HostPort PsServer::address() const { return server_->address(); }

const rpc::ConnectionGate& PsServer::gate() const { return server_->gate(); }

}  // namespace pw::dp
