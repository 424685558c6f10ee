// validate(JobConfig): every field's range, named by its path, before anything is planned.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>
#include <utility>
#include <sstream>

#include "core/error.h"
#include "dataparallel/ps/bounds.h"
#include "models/data/normalization.h"
#include "train/job_config.h"

namespace pw::train {
namespace {

class Checker {
 public:
  template <typename T>
  void at_least(const char* path, T value, T low) {
    if (!(value >= low)) fail(path, value, "must be >= " + text(low));
  }
  template <typename T>
  void in_range(const char* path, T value, T low, T high) {
    if (!(value >= low && value <= high)) fail(path, value, "must be in [" + text(low) + ", " + text(high) + "]");
  }
  void positive(const char* path, double value) {
    if (!(value > 0) || !std::isfinite(value)) fail(path, value, "must be > 0");
  }
  void steps(const char* path, std::int64_t value) {   // -1 (unset) or a positive count
    if (value != -1 && value < 1) fail(path, value, "must be >= 1 (or -1: not set)");
  }
  // The ranges of the flags that set these fields (tools/train_command.cpp, tools/plan_command.cpp),
  // in the flags' words, so that a config is held to what a flag is.
  void whole(const char* path, std::int64_t value, std::int64_t low, std::int64_t high, const char* unset = nullptr) {
    if (unset != nullptr && value == 0) return;
    if (!(value >= low && value <= high))
      fail(path, value, "must be a whole number from " + text(low) + " to " + text(high) +
                            (unset != nullptr ? std::string(" (or 0: ") + unset + ")" : std::string()));
  }
  void number(const char* path, double value, double low, double high) {
    if (!(value >= low && value <= high))
      fail(path, value, "must be a number from " + words(low) + " to " + words(high));
  }
  // 0 (a default) or a finite number above 0.
  void zero_or_positive(const char* path, double value, const char* zero) {
    if (value != 0 && !(value > 0 && std::isfinite(value)))
      fail(path, value, std::string("must be a finite number above 0 (or 0: ") + zero + ")");
  }
  void finite(const char* path, double value) {
    if (!std::isfinite(value)) fail(path, value, "must be a finite number");
  }
  template <typename T>
  [[noreturn]] void fail(const std::string& path, T value, const std::string& rule) {
    throw ConfigError(path, text(value) + "; " + rule);
  }

 private:
  template <typename T>
  static std::string text(T v) {
    std::ostringstream out;
    out << v;
    return out.str();
  }
  // 1000000 rather than 1e+06, 0.001, 1e-06.
  static std::string words(double v) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.15g", v);
    return buffer;
  }
};

}  // namespace

void validate(const JobConfig& c) {
  Checker k;
  k.at_least("/model/width", c.model.width, 1);
  k.in_range("/model/embedding_dim", c.model.embedding_dim, 1, 4096);
  for (std::size_t i = 0; i < c.model.embedding_rows.size(); ++i)
    k.in_range(("/model/embedding_rows/" + std::to_string(i)).c_str(), c.model.embedding_rows[i], std::int64_t{1},
               std::int64_t{1} << 24);
  k.at_least("/data/synthetic_size", c.data.synthetic_size, std::int64_t{1});
  k.at_least("/data/batch_size", c.data.batch_size, std::int64_t{1});
  k.at_least("/data/epochs", c.data.epochs, std::int64_t{1});
  k.steps("/data/steps", c.data.steps);
  k.at_least("/data/eval_batches", c.data.eval_batches, std::int64_t{-1});   // -1: all, 0: none
  if (c.data.synthetic_shape.size() != 3) k.fail("/data/synthetic_shape", c.data.synthetic_shape.size(), "dimensions; expected C, H and W");
  for (const auto d : c.data.synthetic_shape) k.at_least("/data/synthetic_shape", d, std::int64_t{1});
  k.in_range("/data/image_size", c.data.image_size, std::int64_t{1}, std::int64_t{8192});
  if (c.data.normalize) {
    const auto& d = c.data.dataset;
    if (d != "image-folder" && d != "shards" && d != "cifar10")
      throw ConfigError("/data/normalize", "applies to the image data sets (image-folder, shards, cifar10), not to " + d);
    try {
      models::data::check_normalization(*c.data.normalize);
    } catch (const InputError& e) {
      throw ConfigError("/data/normalize", e.what());
    }
  }
  k.at_least("/pipeline/stages", c.pipeline.stages, 0);
  k.at_least("/pipeline/micro_batches", c.pipeline.micro_batches, 0);
  k.at_least("/pipeline/chunks", c.pipeline.chunks, 0);
  k.in_range("/replicas/replicas", c.replicas.replicas, 1, 4096);
  k.at_least("/replicas/bucket_bytes", c.replicas.bucket_bytes, std::int64_t{1});
  k.in_range("/ps/servers", c.ps.servers, 0, 64);
  k.in_range("/ps/staleness", c.ps.staleness, 0, 1000000);
  k.at_least("/ps/lr", c.ps.lr, 0.0);
  k.at_least("/ps/admit_after", c.ps.admit_after, 1);
  k.at_least("/ps/max_rows", c.ps.max_rows, std::int64_t{0});
  k.at_least("/ps/row_ttl", c.ps.row_ttl, std::int64_t{0});
  k.at_least("/optimizer/lr", c.optimizer.lr, 0.0);
  k.in_range("/optimizer/momentum", c.optimizer.momentum, 0.0, 1.0);
  k.at_least("/optimizer/weight_decay", c.optimizer.weight_decay, 0.0);
  k.positive("/timeouts/stage_seconds", c.timeouts.stage_seconds);
  k.positive("/timeouts/heartbeat_seconds", c.timeouts.heartbeat_seconds);
  k.positive("/timeouts/startup_seconds", c.timeouts.startup_seconds);
  k.at_least("/checkpoints/every_steps", c.checkpoints.every_steps, std::int64_t{0});
  k.at_least("/checkpoints/every_seconds", c.checkpoints.every_seconds, 0.0);
  k.at_least("/checkpoints/keep", c.checkpoints.keep, 1);
  k.at_least("/recovery/max_bad_steps", c.recovery.max_bad_steps, 1);
  k.at_least("/recovery/max_rollbacks", c.recovery.max_rollbacks, 0);
  k.in_range("/recovery/rollback_lr_factor", c.recovery.rollback_lr_factor, 1e-6, 1.0);
  k.at_least("/recovery/clip_grad_norm", c.recovery.clip_grad_norm, 0.0);
  k.at_least("/numerics/loss_scale", c.numerics.loss_scale, 0.0);
  k.positive("/numerics/initial_loss_scale", c.numerics.initial_loss_scale);
  k.at_least("/numerics/loss_scale_window", c.numerics.loss_scale_window, 1);
  // Thread counts far past the machine exhaust it (OpenMP and oneTBB then fail or crash while
  // starting threads): at most 4 per hardware thread, said in words.
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int most_threads = 4 * hardware;
  for (const auto& [path, value] : {std::pair{"/resources/threads", c.resources.threads},
                                    std::pair{"/resources/loader_threads", c.resources.loader_threads}}) {
    k.at_least(path, value, 0);
    if (value > most_threads)
      k.fail(path, value, "at most " + std::to_string(most_threads) + " (4 per hardware thread; this machine has " +
                              std::to_string(hardware) + ")");
  }
  k.in_range("/resources/prefetch_batches", c.resources.prefetch_batches, 0, 64);
  k.at_least("/resources/device_memory", c.resources.device_memory, std::int64_t{0});
  // Past the coarse checks above (whose messages callers know): the flags' own ranges, so that a
  // --config file cannot set what no flag accepts (a stage timeout of 1e-320 seconds).
  k.whole("/data/batch_size", c.data.batch_size, 1, std::int64_t{1} << 24);
  k.whole("/pipeline/stages", c.pipeline.stages, 1, 4096, "from the split, else 1");
  k.whole("/pipeline/micro_batches", c.pipeline.micro_batches, 1, std::int64_t{1} << 20, "one per stage");
  k.whole("/pipeline/chunks", c.pipeline.chunks, 1, 64, "2 for interleaved, else 1");
  k.whole("/ps/admit_after", c.ps.admit_after, 1, dp::kMaxAdmitAfter);
  k.zero_or_positive("/ps/lr", c.ps.lr, "the dense learning rate");
  k.zero_or_positive("/optimizer/lr", c.optimizer.lr, "the optimizer's default");
  k.finite("/optimizer/weight_decay", c.optimizer.weight_decay);
  k.number("/timeouts/stage_seconds", c.timeouts.stage_seconds, 0.001, 1e6);
  k.number("/timeouts/heartbeat_seconds", c.timeouts.heartbeat_seconds, 0.5, 1e6);
  k.number("/timeouts/startup_seconds", c.timeouts.startup_seconds, 0.1, 1e6);
  k.finite("/checkpoints/every_seconds", c.checkpoints.every_seconds);
  k.finite("/recovery/clip_grad_norm", c.recovery.clip_grad_norm);
  k.finite("/numerics/loss_scale", c.numerics.loss_scale);
  check_tls_fields(c.tls);
}

void check_tls_fields(const TlsConfig& tls) {
  if (!tls.enabled()) return;
  for (const auto& [path, value] :
       {std::pair{"/tls/cert", &tls.cert}, std::pair{"/tls/key", &tls.key}, std::pair{"/tls/ca", &tls.ca}})
    if (value->empty())
      throw ConfigError(path, "missing; TLS needs all three of /tls/cert, /tls/key and /tls/ca (PEM files: this "
                              "host's certificate, its key, the job's CA), or none");
}

rpc::Tls load_job_tls(const TlsConfig& tls) {
  check_tls_fields(tls);
  return rpc::load_tls(rpc::TlsFiles{tls.cert, tls.key, tls.ca});
}

}  // namespace pw::train
