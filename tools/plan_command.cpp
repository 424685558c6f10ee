#include "tools/plan_command.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/units.h"
#include "kernels/cuda_probe.h"
#include "kernels/runtime.h"
#include "models/data/dataset.h"
#include "models/data/normalization.h"
#include "partition/model_description.h"
#include "partition/profiler.h"
#include "pipeline/schedule_comparison.h"
#include "tools/flag_checks.h"
#include "tools/job_flags.h"
#include "tools/plan_output.h"
#include "tools/plan_search.h"
#include "train/job_plan.h"
#include "train/layout_prediction.h"
#include "train/link_calibration.h"

namespace pw::tools {
namespace {

constexpr const char* kDataDirEnv = "PW_FASHION_MNIST_DIR";

// What the command line takes from the environment, as train does: the Fashion-MNIST folder.
train::JobConfig with_data_dir(train::JobConfig job) {
  const char* dir = std::getenv(kDataDirEnv);
  if (job.resources.data_dir.empty() && dir != nullptr) job.resources.data_dir = dir;
  return job;
}

void check_profile_device(const kernels::Device& device) {
  if (!device.is_cuda()) return;
  const int n = kernels::cuda_device_count();
  PW_INPUT_CHECK(device.index < n, "--device " << device.str() << ": this machine has " << n << " CUDA device(s)"
                                               << (n == 0 ? "; use --device cpu:0" : ""));
}

train::LinkSpeeds link_speeds_of(const PlanCommand& c) {
  auto links = train::default_link_speeds(c.job.resources.device);
  // CPU ranks run on this host (threads of one process, or processes it launches) and share its cores.
  if (!c.job.resources.device.is_cuda()) {
    links.host_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    // Over the in-process links of embedded ranks; ranks as processes would talk over sockets.
    try {
      links.latency_s = train::measure_stage_handoff(0);
      links.busy_handoff_s = std::max(0.0, train::measure_stage_handoff(links.host_cores) - links.latency_s);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "plan: could not measure a message's hand-off between stages (%s); assuming none\n", e.what());
    }
  }
  // The replicas' collectives, as they run here (Gloo on loopback), not as stated; --link-bandwidth
  // states both links instead.
  if (!c.job.resources.device.is_cuda() && c.link_bandwidth.empty()) {
    try {
      const auto measured = train::measure_cpu_allreduce();
      links.replica_bytes_per_s = measured.bytes_per_s;
      links.replica_latency_s = measured.latency_s;
      links.replica_call_s = measured.call_s;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "plan: could not measure the replicas' all-reduce on loopback (%s); assuming %.0f GB/s\n",
                   e.what(), links.replica_bytes_per_s / 1e9);
    }
  }
  if (!c.link_bandwidth.empty()) {
    double rate = 0;
    try {
      rate = static_cast<double>(parse_bytes(c.link_bandwidth));
    } catch (const InputError& e) {
      throw InputError(std::string("--link-bandwidth: ") + e.what());
    }
    PW_INPUT_CHECK(rate > 0, "--link-bandwidth " << c.link_bandwidth << ": need a positive rate");
    links.stage_bytes_per_s = rate;
    links.replica_bytes_per_s = rate;
  }
  return links;
}

PlanReport make_report(const PlanCommand& c, const train::JobConfig& job, const train::LinkSpeeds& links) {
  PlanReport r;
  r.job = train::plan_job(job);
  train::check_devices(r.job.config, r.job.shape().world_size());   // one per rank, as train checks them
  r.device = job.resources.device;
  auto& runtime = kernels::DeviceRuntime::get(r.device);
  if (job.resources.threads > 0) runtime.set_threads(job.resources.threads);
  r.threads = runtime.threads();
  r.links = links;
  const auto choice = train::split_choice_of(r.job);
  r.method = choice.split_points.empty() ? std::string(enum_name(job.pipeline.partition))
                                         : "split " + partition::format_split_points(choice.split_points);
  const auto micro_batch = train::micro_batch_size_of(r.job);
  if (!c.json) {
    std::fprintf(stderr, "profiling %d layers of %s on %s (micro-batch %lld, %d repeats)...\n",
                 r.job.model.layer_count(), r.job.model.name.c_str(), r.device.str().c_str(),
                 static_cast<long long>(micro_batch), c.repeats);
  }
  r.profiles = partition::profile_layers(r.job.model, r.device,
                                        train::prediction_profile_options(r.job, micro_batch, c.repeats, job.seed, links));
  for (const auto& p : r.profiles) r.parameters += p.parameters;
  r.prediction = train::predict_job(r.job, r.profiles, links);
  if (c.compare_schedules) {
    const auto& s = r.job.schedule;
    const bool interleaved = s.kind == pipeline::ScheduleKind::Interleaved ||
                             s.kind == pipeline::ScheduleKind::InterleavedZeroBubble;
    const int interleaved_chunks = interleaved ? s.chunks : std::max(job.pipeline.chunks, 2);
    r.comparison = pipeline::compare_schedules(r.job.model, r.profiles, r.prediction.cost, choice, interleaved_chunks,
                                               train::core_sharing_of(r.job, links));
  }
  return r;
}

}  // namespace

void add_plan_command(CLI::App& app, PlanCommand& c) {
  auto* cmd = app.add_subcommand("plan", "split a model into pipeline stages and predict step time and memory, or "
                                         "search the layouts that fit (--search)");
  auto& job = c.job;
  job.model.name = "resnet18";
  job.pipeline.partition = partition::PartitionMethod::Profile;
  Binder b{*cmd, c.flags};
  add_config_option(*cmd, job);   // first: the flags below override what it sets

  b.option("--model", "/model/name", job.model.name, "seed-cnn, resnet18/34/50/101/152, vgg16, dlrm")->capture_default_str();
  b.option("--width", "/model/width", job.model.width, "ResNet base width / VGG width scale (64 = standard)")
      ->capture_default_str()->check(Positive);
  b.option("--embedding-rows", "/model/embedding_rows", job.model.embedding_rows, "dlrm: rows of each sparse feature's table")
      ->delimiter(',');
  b.option("--embedding-dim", "/model/embedding_dim", job.model.embedding_dim, "dlrm: width of the embedding rows")
      ->capture_default_str()->check(range(1, 4096));
  b.option("--dataset", "/data/dataset", job.data.dataset, "fashion-mnist, synthetic, synthetic-clicks, image-folder, "
                                                           "shards or cifar10 (sets the sample shape)")
      ->capture_default_str();
  b.option("--data-dir", "/resources/data_dir", job.resources.data_dir, "the data set's folder, as for train");
  b.option("--image-size", "/data/image_size", job.data.image_size, "image-folder, shards: samples are 3 x S x S")
      ->capture_default_str()->check(range(1, 8192));
  b.parsed("--synthetic-shape", "/data/synthetic_shape", job.data.synthetic_shape, models::data::parse_sample_shape,
           "CxHxW of synthetic samples")->default_str("1x28x28");
  b.option("--synthetic-size", "/data/synthetic_size", job.data.synthetic_size, "training samples of the synthetic data set")
      ->capture_default_str();
  b.option("--seed", "/seed", job.seed, "seed of weights and profiling inputs")->capture_default_str();

  auto* stages = b.option("--stages", "/pipeline/stages", job.pipeline.stages, "pipeline stages P (default: from --split, else 1)")
                     ->check(range(1, 4096));
  auto* micro_batches = b.option("--micro-batches", "/pipeline/micro_batches", job.pipeline.micro_batches,
                                 "micro-batches M per replica's mini-batch (default: P)")->check(range(1, 1 << 20));
  b.option("--batch-size", "/data/batch_size", job.data.batch_size, "global mini-batch size, split over replicas and "
                                                                    "micro-batches")
      ->capture_default_str()->check(range(std::int64_t{1}, std::int64_t{1} << 24));
  auto* schedule = b.choice("--schedule", "/pipeline/schedule", job.pipeline.schedule, "");
  auto* chunks = b.option("--chunks", "/pipeline/chunks", job.pipeline.chunks, "model chunks per stage V (default: 2 for "
                                                                               "interleaved, else 1)")->check(range(1, 64));
  auto* split = b.parsed("--split", "/pipeline/split", job.pipeline.split, partition::parse_split_points,
                         "explicit split points: first layer of stages 1..P-1, e.g. 3,7,12");
  auto* method = b.choice("--partition", "/pipeline/partition", job.pipeline.partition, "how stages are cut when --split is not given")
                     ->excludes(split);
  auto* recompute = b.recompute(job.pipeline, "which stages re-run forward instead of keeping activations");
  auto* recompute_layers = b.option("--recompute-layers", "/pipeline/recompute_layers", job.pipeline.recompute_layers,
                                    "layers (by name) that keep no activations and re-run their forward before their backward")
                               ->delimiter(',');
  b.choice("--optimizer", "/optimizer/kind", job.optimizer.kind, "its state's memory");
  b.flag_setting("--offload-optimizer", "/optimizer/offload", job.optimizer.offload, models::OptimizerOffload::Host,
                 "the optimizer state lives in host memory, outside the device's cap");
  auto* replicas = b.option("--replicas", "/replicas/replicas", job.replicas.replicas,
                            "data-parallel replicas of the pipeline; --batch-size is split over them")
                       ->capture_default_str()->check(range(1, 4096));
  auto* shard = b.flag_setting("--shard-optimizer", "/replicas/optimizer_state", job.replicas.optimizer_state,
                               dp::OptimizerState::Sharded,
                               "each replica holds the optimizer state of 1/--replicas of every stage's parameters");
  b.parsed("--bucket-size", "/replicas/bucket_bytes", job.replicas.bucket_bytes, parse_bytes,
           "gradients are all-reduced in buckets of about this size")->default_str("25MiB");
  b.choice("--precision", "/numerics/precision", job.numerics.precision,
           "16-bit weights and activations keep fp32 master weights and optimizer state");
  b.option("--ps", "/ps/servers", job.ps.servers, "parameter servers holding the model's embedding tables")
      ->check(range(0, 64));
  auto* device = b.parsed("--device", "/resources/device", job.resources.device, kernels::Device::parse,
                          "device the layers are profiled on, cpu:N or cuda:N (default: the first of --devices)")
                     ->default_str(job.resources.device.str());
  b.option("--threads", "/resources/threads", job.resources.threads, "threads of the CPU device (default: all)")
      ->check(Positive);
  b.parsed("--device-memory", "/resources/device_memory", job.resources.device_memory, parse_bytes,
           "memory cap of each device, e.g. 1GiB (default: none)");
  b.option("--prefetch-batches", "/resources/prefetch_batches", job.resources.prefetch_batches,
           "training batches the data loader builds ahead, as for train (its buffers are the first stage's memory "
           "on CPU devices)")
      ->capture_default_str()->check(NonNegative);
  b.option("--steps", "/data/steps", job.data.steps, "optimizer steps of the run, as for train (a shorter run's data "
                                                     "loader holds fewer batches)")
      ->check(Positive);

  cmd->add_option("--link-bandwidth", c.link_bandwidth,
                  "bytes per second between stages and between replicas, e.g. 10GB (default: 10GB on CPU, 25GB on CUDA)");
  cmd->add_option("--repeats", c.repeats, "timed runs per layer after one warm-up")->capture_default_str()
      ->check(range(1, 1000));
  cmd->add_flag("--json", c.json, "print the plan as one JSON object");
  cmd->add_flag("--grid", c.grid, "also print the schedule's step x stage grid (equal op times)");
  cmd->add_flag("--compare-schedules", c.compare_schedules,
                "also simulate every schedule kind on this layout: step time, bubble, peak activations, messages");

  const std::string search = "Layout search";
  auto* search_flag = cmd->add_flag("--search", c.search, "rank the layouts (stages x replicas x micro-batches x schedule x "
                                                          "recompute x sharding) that fit --devices by predicted step time")
                          ->group(search);
  // A count is the search's; a list is the job's devices, as train takes them.
  c.flags.add("/resources/devices", "--devices");
  auto* devices = cmd->add_option_function<std::string>(
                         "--devices",
                         [&c](const std::string& text) {
                           long n = 0;
                           const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
                           const bool count = error != std::errc::invalid_argument && end == text.data() + text.size();
                           if (!count) {
                             try {
                               c.job.resources.devices = parse_device_list(text);
                             } catch (const InputError& e) {
                               throw InputError(std::string("--devices: ") + e.what());
                             }
                             return;
                           }
                           PW_INPUT_CHECK(error == std::errc() && n >= 1 && n <= 4096, "--devices: got " << text << "; expected a whole number "
                                                                  "from 1 to 4096 (--search) or the job's devices, "
                                                                  "e.g. cpu:0,cpu:1");
                           c.devices = static_cast<int>(n);
                         },
                         "--search: how many devices the layouts may use; otherwise the job's devices, one per "
                         "stage, e.g. cuda:0,cuda:1 (as for train)")
                      ->group(search);
  auto* nodes = cmd->add_option("--nodes", c.nodes, "--search: the devices split evenly over this many nodes")
                    ->capture_default_str()->check(range(1, 4096))->group(search);
  auto* top = cmd->add_option("--top", c.top, "--search: layouts printed")->capture_default_str()
                  ->check(range(1, 1000))->group(search);
  auto* write = cmd->add_option("--write-config", c.write_config,
                                "--search: write the best layout as a job config (JSON) that pipewright train --config runs")
                    ->group(search);
  for (auto* o : {nodes, top, write}) o->needs(search_flag);
  cmd->callback([&c, stages, micro_batches, schedule, chunks, split, method, recompute, recompute_layers, replicas, shard,
                 devices, device, search_flag] {
    if (devices->count() > 0) {
      const bool listed = !c.job.resources.devices.empty();
      PW_INPUT_CHECK(search_flag->count() > 0 || listed,
                     "--devices " << c.devices << " requires --search (a count of devices for the search); list the "
                                  << "job's own devices as train takes them, e.g. cpu:0,cpu:1");
      PW_INPUT_CHECK(search_flag->count() == 0 || !listed,
                     "--search --devices takes how many devices the layouts may use, e.g. --devices 4, not a list");
      // The layers are profiled on the job's first device unless --device says otherwise.
      if (listed && device->count() == 0) c.job.resources.device = c.job.resources.devices.front();
    }
    for (auto* o : {stages, micro_batches, chunks, split, method, recompute_layers, replicas, shard})
      if (o->count() > 0 && c.layout_flag_given.empty()) c.layout_flag_given = o->get_name();
    c.schedule_given = schedule->count() > 0;
    c.recompute_given = recompute->count() > 0;
    std::exit(run_plan(c));
  });
}

int run_plan(const PlanCommand& c) {
  const train::JobConfig job = with_data_dir(c.job);
  check_profile_device(job.resources.device);
  const auto links = link_speeds_of(c);
  try {
    if (c.search) return run_plan_search(c, job, links);
    const PlanReport report = make_report(c, job, links);
    if (c.json) {
      std::printf("%s\n", plan_json(report).dump(2).c_str());
    } else {
      print_plan(report);
      if (c.compare_schedules) print_comparison(report);
      if (c.grid) std::printf("\n%s", pipeline::format_grid(report.job.schedule).c_str());
    }
  } catch (const train::ConfigError& e) {
    throw InputError(c.flags.message_of(e));
  } catch (const InputError& e) {
    throw InputError(c.flags.translate(e.what()));
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace pw::tools
