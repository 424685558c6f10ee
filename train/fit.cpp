#include "train/fit.h"

#include "core/log.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

#include "core/clock.h"
#include "core/durable_file.h"
#include "core/memory_trace.h"
#include "core/trace.h"
#include "core/units.h"
#include "dataparallel/topology.h"
#include "kernels/runtime.h"
#include "rpc/launch_env.h"
#include "train/bad_sample_summary.h"
#include "train/checkpointer.h"
#include "train/restart_baseline.h"
#include "train/fault_injection.h"
#include "train/job_session.h"
#include "train/parameter_servers.h"
#include "train/progress.h"
#include "train/run_monitors.h"
#include "train/trace_file.h"

namespace pw::train {
namespace {

using models::data::DataParts;

void write_json_file(const std::string& path, const nlohmann::json& j) { write_file_durably(path, j.dump(2) + "\n"); }

// Fails before training when an output file could not be written later.
void check_writable(const std::string& path, const char* what) {
  if (path.empty()) return;
  const auto parent = std::filesystem::absolute(path).parent_path();
  PW_INPUT_CHECK(std::filesystem::is_directory(parent),
                 what << " path " << path << ": folder " << parent.string() << " does not exist");
  PW_INPUT_CHECK(!std::filesystem::is_directory(path), what << " path " << path << " is a folder; give a file name");
}

struct Throughput {
  double median_step_ms = 0.0;
  double samples_per_second = 0.0;   // batch size over the median step time
};

// Steps after the warm-up (first-use costs: primitive creation, allocator growth) are timed.
Throughput steady_throughput(std::vector<double> seconds, std::int64_t warmup, std::int64_t batch) {
  if (static_cast<std::int64_t>(seconds.size()) > warmup) seconds.erase(seconds.begin(), seconds.begin() + warmup);
  if (seconds.empty()) return {};
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  return {median * 1e3, median > 0 ? static_cast<double>(batch) / median : 0.0};
}

// This rank's part of one split of the data set, and the split's size as rank 0 read it (a rank
// that reads nothing learns it from rank 0; one that reads labels only checks it).
struct RankData {
  std::unique_ptr<models::data::Dataset> set;
  std::int64_t size = 0;
};

RankData open_rank_data(Engine& engine, models::data::Split split, const char* key,
                        const std::shared_ptr<models::data::BadSampleLog>& bad_samples, rpc::Deadline deadline) {
  const auto parts = engine.data_parts();
  const auto& config = engine.plan().config;
  RankData d;
  if (parts != DataParts::None) d.set = open_job_dataset(config, split, parts, bad_samples);
  // The batches are sized by the plan, which read the training split's shape: a split or a rank
  // whose set differs would write past them.
  const auto& planned = engine.plan().data;
  if (d.set && (d.set->sample_shape() != planned.sample_shape || d.set->num_classes() != planned.num_classes))
    throw ConfigError("/data/dataset", d.set->name() + ": the " + key + " split on rank " + std::to_string(engine.rank()) +
                                           " has samples of " + kernels::shape_str(d.set->sample_shape()) + " in " +
                                           std::to_string(d.set->num_classes()) + " classes, but the job planned " +
                                           kernels::shape_str(planned.sample_shape) + " in " +
                                           std::to_string(planned.num_classes) + "; every split and rank must agree");
  auto& store = engine.links().store();
  const std::string name = std::string("data/") + key;
  if (engine.rank() == 0) {
    d.size = d.set->size();
    store.set(name, std::to_string(d.size));
    return d;
  }
  d.size = std::stoll(engine.links().get(name, deadline));
  if (d.set)
    PW_INPUT_CHECK(d.set->size() == d.size, "rank " << engine.rank() << " reads " << d.set->size() << " " << key
                                                    << " samples of " << d.set->name() << " but rank 0 reads "
                                                    << d.size << "; give every rank the same data");
  return d;
}

// A launcher's restarts of this job, for the summary.
void add_restarts(nlohmann::json& j, const rpc::RestartEnv& restarts) {
  j["restarts"] = restarts.count;
  j["restart_causes"] = restarts.causes;
}

// What to resume from: /checkpoints/resume, or after a launcher's restart the newest checkpoint
// of /checkpoints/dir (none yet: from the start). Rank 0 decides and tells the others.
std::string resume_folder_of(Engine& engine, Checkpointer& checkpointer, rpc::Deadline deadline) {
  const auto& c = engine.plan().config;
  const std::string key = "fit/resume";
  if (engine.rank() != 0) {
    const auto value = engine.links().get(key, deadline);
    if (value.rfind("error:", 0) == 0)
      throw rpc::AbortedError("rank " + std::to_string(engine.rank()) + ": rank 0 cannot resume: " + value.substr(6));
    return value.substr(3);
  }
  std::string folder;
  try {
    // First of all, the checkpoint folder becomes this job's (another job's lock is refused here).
    checkpointer.claim();
    const auto& dir = c.checkpoints.dir;
    if (!c.checkpoints.resume.empty()) folder = resolve_resume(c.checkpoints.resume);
    // A restarted job goes on from its own newest checkpoint, when that is later than the one resumed.
    if (engine.links().restarts().count > 0 && !dir.empty()) {
      const auto newest = newest_checkpoint(dir);
      if (newest && (folder.empty() || read_manifest(*newest).step > read_manifest(folder).step)) folder = *newest;
    }
    // New checkpoints must not mix with a run they do not continue.
    if (!dir.empty()) {
      const std::int64_t from = folder.empty() ? -1 : read_manifest(folder).step;
      if (const auto later = newest_checkpoint(dir); later && read_manifest(*later).step > from)
        throw ConfigError("/checkpoints/dir", dir + " holds checkpoints of another run (newest " + *later + ")" +
                                                  (folder.empty() ? "; resume it with /checkpoints/resume " + dir
                                                                  : "; later than the one resumed from") +
                                                  ", or give an empty folder");
    }
  } catch (const std::exception& e) {
    engine.links().store().set(key, std::string("error:") + e.what());
    throw;
  }
  engine.links().store().set(key, "ok:" + folder);
  return folder;
}

// Every rank loads its part (by name, whatever layout saved it); rank 0 restores the parameter
// servers' tables from the same cut.
CheckpointManifest restore_checkpoint(Engine& engine, const std::string& folder, const std::string& barrier,
                                      rpc::Deadline deadline) {
  const auto& plan = engine.plan();
  auto m = read_manifest(folder);
  const auto why = resume_difference(m.config, to_json(plan.config));
  PW_INPUT_CHECK(why.empty(), "cannot resume from " << folder << ": " << why
                                                    << "; a checkpoint resumes the same model, data, seed and optimizer "
                                                       "(the stages, split, replicas and steps may change)");
  PW_INPUT_CHECK(!engine.parameter_servers() || !m.ps_folder.empty(),
                 "cannot resume from " << folder << ": it holds no parameter-server snapshot and this job uses "
                                                    "parameter servers");
  // Every rank checks and loads its dense part first; only then are the servers' tables replaced.
  engine.restore(m);
  engine.links().barrier(barrier + "/dense", deadline);
  if (engine.is_primary() && engine.parameter_servers()) {
    for (const auto& f : m.ps_files) verify_file(folder, f);
    engine.parameter_servers()->restore((std::filesystem::path(folder) / m.ps_folder).string());
  }
  engine.links().barrier(barrier, deadline);
  return m;
}

// After /recovery/max_bad_steps non-finite steps in a row: every rank goes back to the newest checkpoint
// and continues with a lower learning rate (nullopt on every rank: there is none).
std::optional<CheckpointManifest> roll_back(Engine& engine, Checkpointer& checkpointer, std::int64_t bad,
                                            std::int64_t rollbacks) {
  const auto& c = engine.plan().config;
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(c.timeouts.stage_seconds * 1000));
  const double lr_now = engine.lr();
  checkpointer.finish();
  const auto folder = checkpointer.newest(deadline);
  if (folder.empty()) return std::nullopt;
  const auto m = restore_checkpoint(engine, folder, "rollback/" + std::to_string(rollbacks), deadline);
  // The checkpoints after it belong to the trajectory given up.
  checkpointer.drop_after(m.step);
  engine.set_lr(std::min(m.lr, lr_now) * c.recovery.rollback_lr_factor);
  if (engine.is_primary())
    log::outputf("rolled back to %s (step %lld) after %lld non-finite steps in a row; learning rate now %g",
                 folder.c_str(), static_cast<long long>(m.step), static_cast<long long>(bad), engine.lr());
  return m;
}

// " (fp16 loss scale 1024)" under fp16 loss scaling, else empty.
std::string loss_scale_note(const Engine& engine) {
  if (engine.loss_scaler().mode() == LossScaler::Mode::Off) return "";
  std::ostringstream out;
  out << " (fp16 loss scale " << engine.loss_scaler().scale() << ")";
  return out.str();
}

// A resumed job must make steps: /data/steps (or the epochs) is the job's total, counted from its start.
void check_steps_beyond(const JobConfig& c, std::int64_t total_steps, const std::string& folder,
                        std::int64_t saved_step) {
  if (total_steps > saved_step) return;
  if (c.data.steps > 0)
    throw ConfigError("/data/steps", std::to_string(total_steps) + " is at or below step " + std::to_string(saved_step) +
                                         " of the checkpoint resumed (" + folder +
                                         "); /data/steps is the job's total: give more than " +
                                         std::to_string(saved_step));
  throw ConfigError("/data/epochs", std::to_string(c.data.epochs) + " (" + std::to_string(total_steps) +
                                        " steps) is at or below step " + std::to_string(saved_step) +
                                        " of the checkpoint resumed (" + folder +
                                        "); give more epochs, or /data/steps above " + std::to_string(saved_step));
}

// A flag that differs from the checkpoint's job: refused by resume_difference when the checkpoint's
// tensors or data position depend on it; applied here otherwise (the learning rate, the loss
// scale: the checkpoint restored its own), and logged by rank 0 either way.
void apply_overrides(Engine& engine, const CheckpointManifest& m, const FitOptions& o, const FitCallbacks& callbacks) {
  const auto& plan = engine.plan();
  for (const auto& change : resume_overrides(m.config, to_json(plan.config))) {
    std::ostringstream line;
    line << "resuming from " << m.folder << ": overriding " << change.path << " ";
    if (change.path == "/optimizer/lr") {
      line << engine.lr();   // in force at the checkpoint (after any rollback)
      engine.set_lr(plan.optimizer.lr);
      line << " from the checkpoint with " << plan.optimizer.lr;
    } else if (change.path == "/numerics/initial_loss_scale" && engine.loss_scaler().mode() == LossScaler::Mode::Dynamic) {
      line << engine.loss_scaler().scale();   // the checkpoint's scale in force
      engine.set_loss_scale(plan.config.numerics.initial_loss_scale);
      line << " from the checkpoint with " << engine.loss_scaler().scale();
    } else {
      line << change.saved.dump() << " from the checkpoint with " << change.now.dump();
    }
    if (engine.is_primary() && o.progress)
      log::output(callbacks.name_fields ? callbacks.name_fields(line.str()) : line.str());
  }
}

nlohmann::json summary_of(Engine& engine, const std::vector<double>& loss_history,
                          const std::vector<double>& step_seconds, const StepOutcome& last, double train_seconds,
                          std::int64_t samples, std::int64_t correct, const models::EvalResult& eval, double wall,
                          const FitOptions& options) {
  const auto& plan = engine.plan();
  const auto& c = plan.config;
  nlohmann::json j;
  j["model"] = plan.model.name;
  j["params"] = plan.stats.parameters;
  j["activation_bytes_per_sample"] = plan.stats.activation_bytes_per_sample;
  j["dataset"] = plan.data.name;
  j["optimizer"] = enum_name(c.optimizer.kind);
  j["lr"] = plan.optimizer.lr;
  j["seed"] = c.seed;
  j["steps"] = static_cast<std::int64_t>(loss_history.size());
  j["batch_size"] = c.data.batch_size;
  j["samples_per_second"] = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0.0;
  const Throughput steady = steady_throughput(step_seconds, options.warmup_steps, c.data.batch_size);
  j["warmup_steps"] = options.warmup_steps;
  j["median_step_ms"] = steady.median_step_ms;
  j["steady_samples_per_second"] = steady.samples_per_second;
  j["final_loss"] = loss_history.empty() ? 0.0 : loss_history.back();
  j["loss_history"] = loss_history;
  j["train_accuracy"] = samples > 0 ? static_cast<double>(correct) / static_cast<double>(samples) : 0.0;
  j["test_accuracy"] = eval.accuracy;
  if (eval.top5_accuracy >= 0) j["test_top5_accuracy"] = eval.top5_accuracy;
  j["test_loss"] = eval.loss;
  if (plan.objective == models::Objective::BinaryCrossEntropy && eval.auc >= 0) j["test_auc"] = eval.auc;
  j["wall_seconds"] = wall;

  auto& links = engine.links();
  const int world = links.world_size();
  std::vector<std::string> devices;
  if (links.world_kind() == WorldKind::Threads)
    for (int r = 0; r < world; ++r) devices.push_back(device_of_rank(c, r, world, WorldKind::Threads, r).str());
  else
    devices.push_back(engine.device().str());
  j["device"] = devices.front();
  j["devices"] = devices;
  j["threads"] = kernels::DeviceRuntime::get(engine.device()).threads();
  j["world_size"] = world;
  j["launcher"] = links.launcher();
  if (links.world_kind() == WorldKind::Processes) j["rank_addresses"] = links.addresses();
  j["stages"] = plan.schedule.stages;
  j["micro_batches"] = plan.schedule.micro_batches;
  j["schedule"] = pipeline::schedule_kind_name(plan.schedule.kind);
  j["chunks"] = plan.schedule.chunks;
  j["recompute"] = partition::recompute_text(plan.recompute, plan.recompute_stages);
  j["transport"] = links.link_text();
  j["replicas"] = plan.replicas();
  j["precision"] = models::precision_name(plan.precision);
  if (engine.loss_scaler().mode() != LossScaler::Mode::Off) {
    j["loss_scale"] = engine.loss_scaler().scale();
    j["overflow_steps"] = engine.loss_scaler().overflows();
  }
  // What crossed the stage boundaries in the last step (payload bytes, every replica, both ways).
  j["boundary_bytes_per_step"] = last.boundary_bytes;
  if (plan.replicas() > 1) {
    j["bucket_bytes"] = plan.buckets.bucket_bytes;
    j["grad_compression"] = dp::compression_name(plan.buckets.compression);
    j["optimizer_state"] = enum_name(plan.buckets.optimizer_state);
    j["collectives"] = links.collectives_text();
    j["gradient_buckets"] = last.gradient_buckets;
    j["allreduce_exposed_seconds_last_step"] = last.allreduce_exposed_seconds;
  }
  std::vector<int> split;
  for (std::size_t i = 1; i < engine.split().size(); ++i) split.push_back(engine.split()[i].begin);
  j["split"] = split;
  j["stage_peak_memory_bytes"] = last.stage_peak_memory;
  j["peak_memory_bytes"] = last.stage_peak_memory.empty()
                               ? 0
                               : *std::max_element(last.stage_peak_memory.begin(), last.stage_peak_memory.end());
  j["memory"] = nlohmann::json::array();
  for (const auto& m : last.rank_memory)
    j["memory"].push_back({{"rank", m.rank},
                           {"peak_bytes", m.peak_bytes},
                           {"host_bytes", m.host_bytes},
                           {"by_kind",
                            {{"parameters", m.parameters},
                             {"gradients", m.gradients},
                             {"master_weights", m.master_weights},
                             {"optimizer_state", m.optimizer_state},
                             {"activations", m.activations},
                             {"communication", m.communication},
                             {"workspace", m.workspace}}}});
  return j;
}

}  // namespace

std::pair<std::int64_t, std::int64_t> parse_trace_steps(const std::string& text) {
  if (text.empty()) return {0, INT64_MAX};
  const auto colon = text.find(':');
  std::int64_t a = -1, b = -1;
  try {
    PW_INPUT_CHECK(colon != std::string::npos, "");
    std::size_t used = 0;
    a = std::stoll(text.substr(0, colon), &used);
    PW_INPUT_CHECK(used == colon, "");
    b = std::stoll(text.substr(colon + 1), &used);
    PW_INPUT_CHECK(used == text.size() - colon - 1, "");
  } catch (const std::exception&) {
    a = b = -1;
  }
  PW_INPUT_CHECK(a >= 0 && b > a, "'" << text << "': expected trace steps A:B with 0 <= A < B, e.g. 10:20");
  return {a, b};
}

namespace {

TraceMeta trace_meta(const Engine& engine, const partition::Partition& split, std::int64_t clock_offset_ns,
                     int process_rank) {
  const auto& plan = engine.plan();
  TraceMeta m;
  m.model = plan.model.name;
  m.schedule = pipeline::schedule_kind_name(plan.schedule.kind);
  m.stages = plan.schedule.stages;
  m.replicas = plan.replicas();
  m.micro_batches = plan.schedule.micro_batches;
  m.chunks = plan.schedule.chunks;
  for (std::size_t i = 1; i < split.size(); ++i) m.split.push_back(split[i].begin);
  for (const auto& l : plan.model.layers) m.layer_names.push_back(l.name);
  m.job = to_json(plan.config);
  m.device = engine.device().str();
  m.device_memory = plan.config.resources.device_memory;
  m.threads = plan.config.resources.threads;
  m.prefetch_batches = plan.config.resources.prefetch_batches;
  m.process_rank = process_rank;
  m.clock_offset_ns = clock_offset_ns;
  return m;
}

}  // namespace

// The recorder's spans of this process, once every local rank has finished its steps (written
// before saving and evaluation, so nothing that goes wrong there loses them).
void write_trace(Engine& engine, const FitOptions& o, rpc::Deadline deadline) {
  auto& links = engine.links();
  if (links.world_kind() == WorldKind::Threads) links.barrier("traced", deadline);
  if (!links.first_in_process()) return;
  trace::Recorder::global().disable();
  const int process_rank = links.world_kind() == WorldKind::Processes ? links.rank() : 0;
  auto meta = trace_meta(engine, engine.split(), links.clock_offset_ns(), process_rank);
  meta.dropped_spans =
      static_cast<std::int64_t>(trace::Recorder::global().dropped() + trace::MemoryTrace::global().dropped());
  const auto path = links.world_kind() == WorldKind::Processes ? rank_trace_path(o.trace_path, process_rank) : o.trace_path;
  write_chrome_trace(path, meta, trace::Recorder::global().snapshot(), trace::MemoryTrace::global().snapshot());
  if (process_rank == 0 && o.progress)
    log::outputf("trace: %s (read it with pipewright prof, or open it in Perfetto)", path.c_str());
}

nlohmann::json fit(Engine& engine, const FitOptions& o, const FitCallbacks& callbacks) {
  if (!o.debug_dir.empty()) engine.keep_flight_record_in(o.debug_dir);
  const auto& plan = engine.plan();
  const auto& c = plan.config;
  const bool primary = engine.is_primary();
  const auto startup = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(c.timeouts.startup_seconds * 1000));
  const auto parts = engine.data_parts();
  const auto sample_shape = plan.data.sample_shape;
  const auto bad_samples = std::make_shared<models::data::BadSampleLog>();
  RankData train_data = open_rank_data(engine, models::data::Split::Train, "train", bad_samples, startup);
  RankData test_data = open_rank_data(engine, models::data::Split::Test, "test", bad_samples, startup);
  // Whether rank 0 saves: every rank then sends it its weights.
  auto& store = engine.links().store();
  if (primary) store.set("fit/save", o.save_path.empty() ? "no" : "yes");
  const bool saves = engine.links().get("fit/save", startup) == "yes";

  const FeedShape train_shape{train_data.size,        sample_shape,           parts, plan.replicas(), engine.replica(),
                              engine.loader_input_dtype(), engine.loader_memory()};
  TrainFeed feed(train_data.set.get(), train_shape, c.data.batch_size, plan.schedule.micro_batches, c.seed,
                 c.resources.prefetch_batches, c.resources.loader_threads);
  if (feed.batches_per_epoch() == 0)
    throw ConfigError("/data/batch_size", std::to_string(c.data.batch_size) + " is larger than the " +
                                              std::to_string(train_data.size) + " training samples");
  // /data/epochs times the batches of an epoch must be a step count (2^63 - 1 at most).
  if (c.data.steps <= 0 && c.data.epochs > std::numeric_limits<std::int64_t>::max() / feed.batches_per_epoch())
    throw ConfigError("/data/epochs", std::to_string(c.data.epochs) + " epochs of " +
                                          std::to_string(feed.batches_per_epoch()) +
                                          " batches are more steps than can be counted; give at most " +
                                          std::to_string(std::numeric_limits<std::int64_t>::max() / feed.batches_per_epoch()) +
                                          " epochs, or /data/steps");
  const std::int64_t total_steps = c.data.steps > 0 ? c.data.steps : c.data.epochs * feed.batches_per_epoch();
  Checkpointer checkpointer(engine, total_steps);
  std::vector<double> loss_history;
  // Per-step histories grow as steps are made; reserved for at most this many (a job of
  // --steps 2^63 - 1 must not ask for exabytes before its first step).
  constexpr std::int64_t kReservedSteps = std::int64_t{1} << 16;
  loss_history.reserve(static_cast<std::size_t>(std::min(total_steps, kReservedSteps)));
  std::int64_t step = 0, epoch = 0, first_batch = 0, skipped_steps = 0, rollbacks = 0, bad_in_a_row = 0;
  // The checkpoint rolled back to, until a step is applied after it (-1: none).
  std::int64_t rolled_back_to = -1;
  // Resuming: the newest checkpoint of /checkpoints/resume, or of /checkpoints/dir when a launcher restarted us.
  const std::string resume_folder = resume_folder_of(engine, checkpointer, startup);
  std::optional<std::int64_t> resumed_from;
  if (!resume_folder.empty()) {
    // A launcher's restart of a job whose last checkpoint is its last step has nothing left to make
    // but its evaluation; a job resumed by hand with no step to make is a mistake.
    const auto saved = read_manifest(resume_folder);
    if (engine.links().restarts().count == 0) check_steps_beyond(c, total_steps, resume_folder, saved.step);
    PW_INPUT_CHECK(saved.lr > 0, "'" << (std::filesystem::path(resume_folder) / kManifestName).string()
                                     << "' is not a valid checkpoint manifest: /lr "
                                     << saved.lr << "; expected a finite number above 0");
    // The data position must lie in this job's epochs (read_manifest checked it is not negative).
    PW_INPUT_CHECK(saved.batch_in_epoch < feed.batches_per_epoch(),
                   "cannot resume from " << resume_folder << ": its data position, batch " << saved.batch_in_epoch
                                         << " of an epoch, is past this job's " << feed.batches_per_epoch()
                                         << " batches per epoch; expected 0 to " << feed.batches_per_epoch() - 1);
    const auto m = restore_checkpoint(engine, resume_folder, "resumed", startup);
    apply_overrides(engine, m, o, callbacks);
    resumed_from = m.step;
    step = m.step;
    loss_history = m.loss_history;
    skipped_steps = m.skipped_steps;
    rollbacks = m.rollbacks;
    epoch = m.epoch;
    first_batch = m.batch_in_epoch;
    if (primary && o.progress)
      log::outputf("resumed from %s (step %lld of %lld)", resume_folder.c_str(), static_cast<long long>(step),
                   static_cast<long long>(total_steps));
  } else {
    // With parameter servers and a launcher that may restart the job: a checkpoint of step 0.
    write_restart_baseline(engine, checkpointer, loss_history, startup);
  }
  // Each process says once what it runs (a world of threads: rank 0 for all of them).
  if (engine.links().first_in_process() && callbacks.on_start) callbacks.on_start(engine, total_steps);

  std::optional<RunMonitors> monitors;
  if (primary) monitors.emplace(engine, o, step, total_steps);
  engine.reset_peak_memory();
  const auto start = Clock::now();
  double train_seconds = 0.0;
  std::vector<double> step_seconds;
  step_seconds.reserve(static_cast<std::size_t>(std::min(total_steps, kReservedSteps)));
  std::vector<double> stage_busy(static_cast<std::size_t>(plan.schedule.stages), 0.0);
  std::int64_t samples = 0, correct = 0;
  StepOutcome last;
  ProgressLine progress(primary && o.progress ? ProgressOutput::Log : ProgressOutput::None, total_steps, o.log_every);
  UtilisationLine utilisation(o.log_every);
  const bool prefetching = engine.parameter_servers() != nullptr;
  const auto step_delay = injected_step_delay(engine.rank());   // tests only
  // Why the job did not train, once it is known (the same on every rank: it follows from the
  // steps' outcomes, which every rank shares). Training stops there; the job still evaluates and
  // writes its summary, then fails (TrainingFailed).
  std::string failure;
  std::int64_t steps_run = 0, steps_applied = 0, overflows_in_a_row = 0;
  // Rollbacks since the job last trained past the step where a rollback began.
  std::int64_t rollbacks_in_a_row = 0, rolled_back_from = -1;
  while (step < total_steps && failure.empty()) {
    // Batches past the last step are not read (nor their bad samples counted).
    feed.start_epoch(epoch, first_batch,
                     first_batch + std::min(total_steps - step, std::numeric_limits<std::int64_t>::max() - first_batch));
    std::int64_t batch_in_epoch = first_batch;
    first_batch = 0;
    bool rolled_back = false;
    // With parameter servers the next batch is read one step ahead, and its embedding rows are
    // pulled while this step computes (Engine::prefetch).
    std::optional<models::data::Batch> upcoming;
    bool epoch_read = false;
    while (step < total_steps) {
      maybe_kill_at(step + 1, engine.rank());
      std::optional<models::data::Batch> batch;
      double data_wait = 0.0;       // in feed.next(), for the monitors
      double prefetch_wait = 0.0;   // the part of it inside the step's time (the next batch, read ahead)
      if (upcoming) {
        batch = std::move(upcoming);
        upcoming.reset();
      } else if (!epoch_read) {
        const auto l0 = Clock::now();
        trace::ScopedSpan loading(trace::SpanKind::DataLoad, -1, 0, step);
        batch = feed.next();
        data_wait += seconds_since(l0);
      }
      if (!batch) break;
      ++batch_in_epoch;
      const auto t0 = Clock::now();
      if (prefetching && step + 1 < total_steps) {
        {
          const auto l0 = Clock::now();
          trace::ScopedSpan loading(trace::SpanKind::DataLoad, -1, 0, step + 1);
          upcoming = feed.next();
          prefetch_wait = seconds_since(l0);
          data_wait += prefetch_wait;
        }
        if (upcoming) engine.prefetch(*upcoming);
        else epoch_read = true;
      }
      if (step_delay.count() > 0) std::this_thread::sleep_for(step_delay);
      last = engine.step(*batch, checkpointer.primary_flags());
      const double dt = seconds_since(t0);
      train_seconds += dt;
      step_seconds.push_back(dt);
      ++step;
      ++steps_run;
      samples += last.samples;
      correct += last.correct;
      loss_history.push_back(last.skipped ? std::nan("") : last.loss);
      for (std::size_t i = 0; i < last.stage_busy_seconds.size() && i < stage_busy.size(); ++i)
        stage_busy[i] += last.stage_busy_seconds[i];
      if (primary) {
        progress.update(step, last.loss, static_cast<double>(samples) / train_seconds, seconds_since(start));
        if (o.progress && !progress.in_place()) utilisation.add(step, dt, last.stage_busy_seconds);
        if (callbacks.on_step) callbacks.on_step(StepEvent{step, total_steps, dt, &last});
        StepFigures f;
        f.step = step;
        f.outcome = &last;
        f.data_wait_seconds = data_wait;
        f.step_seconds = std::max(0.0, dt - prefetch_wait);
        f.learning_rate = engine.lr();
        f.samples_per_second = static_cast<double>(samples) / train_seconds;
        f.skipped_steps = skipped_steps + (last.skipped ? 1 : 0);
        f.fp16 = plan.precision == models::Precision::Fp16;
        monitors->step(std::move(f), dt);
      }
      if (last.skipped && last.overflow) {
        // fp16 loss scaling at work (torch's GradScaler skips such steps silently): not a bad step,
        // unless the scale is above any the scaler reaches by itself and keeps overflowing.
        ++skipped_steps;
        ++overflows_in_a_row;
        if (primary)
          log::outputf("step %lld: fp16 gradients overflowed at loss scale %g; the step is skipped on every "
                               "rank and the scale halved",
                       static_cast<long long>(step), last.loss_scale);
        if (overflows_in_a_row >= c.recovery.max_bad_steps && last.loss_scale > LossScaler::kMaxScale) {
          std::ostringstream why;
          why << "fp16 gradients overflowed on " << overflows_in_a_row << " steps in a row (up to step " << step
              << "), the last at loss scale " << last.loss_scale
              << ", above 2^24 (the largest dynamic loss scaling grows to); give /numerics/initial_loss_scale 65536 "
                 "or less";
          failure = why.str();
          break;
        }
      } else if (last.skipped) {
        ++skipped_steps;
        ++bad_in_a_row;
        overflows_in_a_row = 0;
        if (primary)
          log::outputf("step %lld: the loss or gradients are not finite (first seen on rank %d); the step is "
                               "skipped on every rank (%lld in a row)",
                       static_cast<long long>(step), last.nonfinite_rank, static_cast<long long>(bad_in_a_row));
        if (bad_in_a_row >= c.recovery.max_bad_steps) {
          std::ostringstream why;
          why << bad_in_a_row << " steps in a row (up to step " << step
              << ") had a non-finite loss or gradients" << loss_scale_note(engine);
          // No step was applied since the last rollback: the weights are the checkpoint's own, and
          // they give non-finite values whatever the learning rate; going back again would loop.
          if (rolled_back_to >= 0) {
            why << " right after rolling back to the checkpoint of step " << rolled_back_to
                << ": its own weights give them, whatever the learning rate; start again with a lower "
                   "/optimizer/lr or from an earlier checkpoint";
            failure = why.str();
            break;
          }
          if (rollbacks_in_a_row >= c.recovery.max_rollbacks) {
            why << " after " << rollbacks_in_a_row << " rollbacks in a row (/recovery/max_rollbacks "
                << c.recovery.max_rollbacks << "; learning rate now " << engine.lr()
                << "); giving up: lower /optimizer/lr or clip with /recovery/clip_grad_norm";
            failure = why.str();
            break;
          }
          const auto m = roll_back(engine, checkpointer, bad_in_a_row, rollbacks);
          if (!m) {
            why << " and there is no checkpoint to roll back to; lower /optimizer/lr, clip with "
                   "/recovery/clip_grad_norm, or give /checkpoints/dir";
            failure = why.str();
            break;
          }
          rolled_back_to = m->step;
          ++rollbacks;
          ++rollbacks_in_a_row;
          rolled_back_from = std::max(rolled_back_from, step);
          bad_in_a_row = 0;
          overflows_in_a_row = 0;
          step = m->step;
          loss_history = m->loss_history;
          // skipped_steps keeps counting the rolled-back ones: they happened.
          epoch = m->epoch;
          first_batch = m->batch_in_epoch;
          rolled_back = true;
          break;
        }
      } else {
        bad_in_a_row = 0;
        overflows_in_a_row = 0;
        ++steps_applied;
        if (step > rolled_back_from) rollbacks_in_a_row = 0;
        rolled_back_to = -1;
      }
      // Written only after a good step: not while steps are being skipped as non-finite.
      if (checkpointer.due(step, last, bad_in_a_row == 0 && !last.skipped)) {
        const bool epoch_done = batch_in_epoch == feed.batches_per_epoch();
        checkpointer.save(TrainingPosition{step, epoch_done ? epoch + 1 : epoch, epoch_done ? 0 : batch_in_epoch,
                                           &loss_history, skipped_steps, rollbacks});
      }
    }
    if (!rolled_back) ++epoch;
  }
  feed.stop();
  checkpointer.finish();
  progress.finish();
  engine.synchronize();
  if (!o.trace_path.empty()) write_trace(engine, o, startup);

  // Every rank learns the same answers, so all save and evaluate alike.
  if (failure.empty() && !engine.weights_finite()) {
    std::ostringstream why;
    why << "the weights are not finite after step " << step << loss_scale_note(engine)
        << "; lower /optimizer/lr or clip with /recovery/clip_grad_norm";
    failure = why.str();
  }
  if (failure.empty() && steps_run > 0 && steps_applied == 0) {
    std::ostringstream why;
    why << "every one of the " << steps_run << " steps made was skipped (non-finite loss or gradients"
        << loss_scale_note(engine) << "); no step updated the weights";
    failure = why.str();
  }
  // The weights are written before evaluation, so nothing that goes wrong there loses them; the
  // weights of a job known not to have trained are not written.
  // A save that fails for the file's sake (a full disk, a folder made read-only) loses neither the
  // evaluation nor the summary, which may be on another disk: it is recorded there, then rethrown.
  std::exception_ptr save_error;
  std::string save_error_text;
  if (saves && failure.empty()) {
    try {
      engine.save(o.save_path);
    } catch (const InputError& e) {
      save_error = std::current_exception();
      save_error_text = e.what();
    }
  }
  // Evaluation batches are micro-batch sized: a stage holds no more at once than in training.
  const FeedShape test_shape{test_data.size,          sample_shape,           parts, plan.replicas(), engine.replica(),
                             engine.loader_input_dtype(), engine.loader_memory()};
  EvalFeed eval_feed(test_data.set.get(), test_shape, c.data.batch_size / plan.eval_fraction(), c.data.eval_batches);
  const models::EvalResult eval = engine.evaluate(eval_feed);
  if (failure.empty() && eval.samples > 0 && !std::isfinite(eval.loss)) {
    std::ostringstream why;
    why << "the test loss is " << eval.loss << " after step " << step << loss_scale_note(engine)
        << "; lower /optimizer/lr or clip with /recovery/clip_grad_norm";
    failure = why.str();
  }
  if (!failure.empty() && callbacks.name_fields) failure = callbacks.name_fields(failure);
  std::optional<nlohmann::json> skipped;
  if (c.data.bad_samples == models::data::BadSamples::Skip)
    skipped = gather_bad_samples(engine, *bad_samples,
                                 Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(c.timeouts.stage_seconds * 1000)));
  const double wall = seconds_since(start);
  if (!primary) {
    if (save_error) std::rethrow_exception(save_error);
    return nlohmann::json::object();
  }
  if (eval.samples > 0) monitors->evaluation(step, eval.accuracy, eval.loss);
  const double sps = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0.0;
  if (o.progress && eval.auc >= 0) log::outputf("test AUC %.4f", eval.auc);
  if (o.progress)
    log::outputf("test accuracy %.4f (loss %.4f, %lld samples); train %.1f samples/s; %s wall", eval.accuracy,
                 eval.loss, static_cast<long long>(eval.samples), sps, format_duration(wall).c_str());
  if (o.progress && skipped && (*skipped)["count"] != 0)
    log::outputf("%lld samples would not decode and were replaced by the next ones (the first: %s)",
                 (*skipped)["count"].get<long long>(), (*skipped)["first"][0].get<std::string>().c_str());
  auto j = summary_of(engine, loss_history, step_seconds, last, train_seconds, samples, correct, eval, wall, o);
  if (skipped) j["bad_samples"] = *skipped;
  if (resumed_from) j["resumed_from_step"] = *resumed_from;
  j["status"] = failure.empty() ? "trained" : "did-not-train";
  if (!failure.empty()) j["failure"] = failure;
  j["skipped_steps"] = skipped_steps;
  j["rollbacks"] = rollbacks;
  j["stragglers"] = monitors->stragglers();
  j["lr"] = engine.lr();
  if (checkpointer.enabled()) j["checkpoints"] = checkpointer.summary();
  add_restarts(j, engine.links().restarts());
  std::vector<double> fraction;
  for (double b : stage_busy) fraction.push_back(train_seconds > 0 ? b / train_seconds : 0.0);
  j["stage_busy_fraction"] = fraction;
  if (engine.parameter_servers()) engine.parameter_servers()->add_summary(j);
  if (callbacks.on_summary) callbacks.on_summary(j);
  if (save_error) j["save_error"] = save_error_text;
  if (!o.summary_path.empty()) write_json_file(o.summary_path, j);
  if (save_error) std::rethrow_exception(save_error);
  if (!failure.empty()) throw TrainingFailed(failure);
  return j;
}

nlohmann::json run_job(const JobConfig& config, const FitOptions& options, const FitCallbacks& callbacks) {
  check_writable(options.summary_path, "summary");
  check_writable(options.save_path, "save");
  check_writable(options.trace_path, "trace");
  JobPlan plan = plan_job(config);
  if (!options.trace_path.empty()) {
    trace::Recorder::global().clear();
    trace::MemoryTrace::global().clear();
    trace::Recorder::global().enable(options.trace_first, options.trace_last);
  }
  // The launcher's ranks and restarts, read once here; a launcher may restart a world of one rank
  // too (pipewright launch --nproc-per-node 1), whose ranks are then threads.
  const auto launch = rpc::launch_env();
  JobSession session(std::move(plan), launch, launch ? rpc::RestartEnv{} : rpc::restart_env());
  nlohmann::json summary = nlohmann::json::object();
  std::optional<FlightDumpOnce> flight_dump;
  if (!options.debug_dir.empty()) flight_dump.emplace(options.debug_dir);
  session.run([&](Engine& engine) {
    const auto& p = engine.plan();
    if (engine.rank() == 0 && p.replicas() > 1) {
      auto grid = dp::Topology(p.schedule.stages, p.replicas()).grid();
      if (!grid.empty() && grid.back() == '\n') grid.pop_back();
      log::output(grid);
    }
    nlohmann::json result;
    try {
      result = fit(engine, options, callbacks);
    } catch (const std::exception& e) {
      if (flight_dump) flight_dump->dump("rank " + std::to_string(engine.rank()) + ": " + e.what());
      throw;
    }
    if (engine.rank() == 0) summary = std::move(result);
  });
  session.finish();
  return summary;
}

}  // namespace pw::train
