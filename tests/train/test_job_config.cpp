// JobConfig: its JSON form round-trips, its hash tells jobs apart, and the first differing field
// is named; resources (where a rank runs) are not part of the job's identity.
#include <thread>

#include <set>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "train/job_config.h"
#include "train/job_plan.h"

using namespace pw;

BOOST_AUTO_TEST_SUITE(job_config)

BOOST_AUTO_TEST_CASE(json_round_trips_and_hashes_what_defines_the_job) {
  train::JobConfig c;
  c.model.name = "resnet18";
  c.pipeline.stages = 4;
  c.pipeline.split = {3, 7, 12};
  c.replicas.replicas = 2;
  c.optimizer.lr = 0.05;
  c.seed = 9;
  const auto j = train::to_json(c);
  const auto back = train::job_config_from_json(j);
  BOOST_TEST(train::to_json(back) == j);
  BOOST_TEST(train::config_hash(j) == train::config_hash(train::to_json(back)));
  BOOST_TEST(train::config_hash(j).size() == 16u);

  auto other = c;
  other.pipeline.micro_batches = 8;
  BOOST_TEST(train::config_hash(train::to_json(other)) != train::config_hash(j));
  BOOST_TEST(train::first_difference(j, train::to_json(other)) == "/pipeline/micro_batches: 0 here, 8 there");
  BOOST_TEST(train::first_difference(j, j).empty());

  // The CUDA numerics are part of the job: ranks must agree on them.
  auto tf32 = c;
  tf32.numerics.allow_tf32 = true;
  tf32.numerics.deterministic = true;
  const auto tf32_json = train::to_json(tf32);
  BOOST_TEST(train::first_difference(j, tf32_json) == "/numerics/allow_tf32: false here, true there");
  BOOST_TEST(train::job_config_from_json(tf32_json).numerics.deterministic);

  // Where a rank runs is its own business.
  auto elsewhere = c;
  elsewhere.resources.device = kernels::Device::cuda(1);
  elsewhere.resources.threads = 7;
  elsewhere.resources.loader_threads = 3;
  elsewhere.resources.prefetch_batches = 5;
  elsewhere.resources.data_dir = "/mnt/data";
  BOOST_TEST(train::config_hash(train::to_json(elsewhere)) == train::config_hash(j));
}

BOOST_AUTO_TEST_CASE(a_programs_model_is_part_of_the_identity_by_its_names) {
  train::JobConfig c;
  partition::ModelDescription m;
  m.name = "mine";
  m.layers = {{"conv1", nullptr}, {"fc", nullptr}};
  m.split_points = {1};
  c.program_model = m;
  const auto j = train::to_json(c);
  BOOST_TEST(j["program_model"]["layers"] == nlohmann::json({"conv1", "fc"}));
  auto renamed = c;
  renamed.program_model->layers[1].name = "fc2";
  BOOST_TEST(train::first_difference(j, train::to_json(renamed)) == "/program_model/layers/1: \"fc\" here, \"fc2\" there");
  BOOST_CHECK_THROW(train::job_config_from_json(j), InputError);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_a_program_model_resumes_under_another_split) {
  train::JobConfig c;
  partition::ModelDescription m;
  m.name = "mine";
  m.layers = {{"conv1", nullptr}, {"conv2", nullptr}, {"fc", nullptr}};
  m.split_points = {1};
  c.program_model = m;
  auto resplit = c;
  resplit.program_model->split_points = {2};
  // Ranks of one job still agree on the split; a checkpoint does not care.
  BOOST_TEST(train::first_difference(train::to_json(c), train::to_json(resplit)) == "/program_model/split_points/0: 1 here, 2 there");
  BOOST_TEST(train::resume_difference(train::to_json(c), train::to_json(resplit)) == "");
  resplit.program_model->split_points = {};
  BOOST_TEST(train::resume_difference(train::to_json(c), train::to_json(resplit)) == "");
  auto renamed = c;
  renamed.program_model->layers[2].name = "head";
  BOOST_TEST(train::resume_difference(train::to_json(c), train::to_json(renamed)) ==
             "/program_model/layers/2: \"fc\" in the checkpoint, \"head\" now");
}

namespace {
// The message of the ConfigError `fn` throws, or "" when it throws none.
template <typename Fn>
std::string config_error(Fn fn) {
  try {
    fn();
  } catch (const train::ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

BOOST_AUTO_TEST_CASE(bad_json_is_a_config_error_naming_the_field_by_its_path) {
  auto parse = [](const char* text) { return [text] { train::job_config_from_json(nlohmann::json::parse(text)); }; };
  BOOST_TEST(config_error(parse(R"({"pipeline": {"stages": "four"}})")) ==
             "/pipeline/stages: the text \"four\"; expected a whole number");
  BOOST_TEST(config_error(parse(R"({"pipeline": {"schedule": "pipedream"}})")) ==
             "/pipeline/schedule: unknown schedule 'pipedream'; accepted: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, v-half, v-min, interleaved-zb, dualpipev");
  BOOST_TEST(config_error(parse(R"({"recovery": {"update_validation": "later"}})")) ==
             "/recovery/update_validation: unknown update validation 'later'; accepted: auto, before, after");
  BOOST_TEST(config_error(parse(R"({"optimizer": {"kind": 3}})")) ==
             "/optimizer/kind: 3; expected one of sgd, adam, adagrad");
  BOOST_TEST(config_error(parse(R"({"optimizer": {"learning_rate": 0.1}})")) ==
             "/optimizer/learning_rate: unknown field; optimizer has kind, lr, momentum, weight_decay, offload");
  BOOST_TEST(config_error(parse(R"({"optimiser": {}})")).find("/optimiser: unknown field; a job config has") == 0u);
  BOOST_TEST(config_error(parse(R"({"data": {"synthetic_shape": "3x224"}})")).find("/data/synthetic_shape: ") == 0u);
  BOOST_TEST(config_error(parse(R"({"resources": {"device_memory": "lots"}})")).find("/resources/device_memory: ") == 0u);
  BOOST_TEST(config_error(parse(R"({"replicas": {"replicas": 4294967296}})")) == "/replicas/replicas: 4294967296; out of range");
  BOOST_TEST(config_error(parse(R"({"pipeline": {"split": [3, "x"]}})")) == "/pipeline/split/1: the text \"x\"; expected a whole number");
  BOOST_TEST(config_error(parse("[1, 2]")) == "/: [1,2]; a job config is a JSON object");
  BOOST_TEST(config_error(parse(R"({"resources": {"device": "gpu0"}})")) ==
             "/resources/device: bad device 'gpu0'; expected cpu, cpu:N, cuda or cuda:N (N >= 0)");
  BOOST_TEST(config_error(parse(R"({"resources": {"devices": ["cpu:0", "cuda:x"]}})")).find("/resources/devices/1: ") == 0u);
}

// /pipeline/recompute takes a mode for every stage or one entry per stage; the list round-trips, a
// mode is written as before, and a wrong entry or count names the field and what it accepts.
BOOST_AUTO_TEST_CASE(recompute_is_a_mode_or_one_entry_per_stage) {
  auto parse = [](const char* text) { return [text] { train::job_config_from_json(nlohmann::json::parse(text)); }; };
  const auto c = train::job_config_from_json(nlohmann::json::parse(R"({"pipeline": {"recompute": ["none", "all", "all"]}})"));
  using partition::Recompute;
  BOOST_TEST((c.pipeline.recompute_stages == std::vector<Recompute>{Recompute::None, Recompute::All, Recompute::All}));
  BOOST_TEST(train::to_json(c)["pipeline"]["recompute"] == nlohmann::json({"none", "all", "all"}));
  BOOST_TEST(train::to_json(train::job_config_from_json(train::to_json(c))) == train::to_json(c));
  const auto mode = train::job_config_from_json(nlohmann::json::parse(R"({"pipeline": {"recompute": "except-last"}})"));
  BOOST_TEST(mode.pipeline.recompute_stages.empty());
  BOOST_TEST(train::to_json(mode)["pipeline"]["recompute"] == "except-last");
  BOOST_TEST(config_error(parse(R"({"pipeline": {"recompute": ["none", "except-last"]}})")) ==
             "/pipeline/recompute/1: the text \"except-last\"; expected none or all (one entry per stage)");
  BOOST_TEST(config_error(parse(R"({"pipeline": {"recompute": []}})")) ==
             "/pipeline/recompute: []; expected one of none, all, except-last, or a list with one entry per stage, "
             "each none or all");
  BOOST_TEST(config_error(parse(R"({"pipeline": {"recompute": "some"}})")).find("/pipeline/recompute: ") == 0u);
  train::JobConfig three;
  three.data.dataset = "synthetic";
  three.pipeline.stages = 2;
  three.pipeline.recompute_stages = {Recompute::All, Recompute::None, Recompute::All};
  BOOST_TEST(config_error([&] { train::plan_job(three); }) ==
             "/pipeline/recompute: 3 entries for 2 stages; expected one entry per stage (each none or all), or one of "
             "none, all, except-last for every stage");
  three.pipeline.recompute_stages.pop_back();
  const auto plan = train::plan_job(three);
  BOOST_TEST((plan.recompute_of(0) == Recompute::All && plan.recompute_of(1) == Recompute::None));
  BOOST_TEST(partition::recompute_text(plan.recompute, plan.recompute_stages) == "all,none");
}

// /pipeline/recompute_layers names layers of the model; it round-trips, is left out when empty
// (identities as before), and a name the model lacks is an error naming the entry and the layers.
BOOST_AUTO_TEST_CASE(recompute_layers_name_layers_of_the_model) {
  train::JobConfig c;
  c.data.dataset = "synthetic";
  BOOST_TEST(!train::to_json(c)["pipeline"].contains("recompute_layers"));
  c.pipeline.recompute_layers = {"relu1", "conv1"};
  BOOST_TEST(train::to_json(c)["pipeline"]["recompute_layers"] == nlohmann::json({"relu1", "conv1"}));
  BOOST_TEST(train::to_json(train::job_config_from_json(train::to_json(c))) == train::to_json(c));
  const auto plan = train::plan_job(c);
  BOOST_TEST((plan.recompute_layers == std::set<std::string>{"conv1", "relu1"}));
  c.pipeline.recompute_layers.push_back("block9");
  const auto message = config_error([&] { train::plan_job(c); });
  BOOST_TEST(message.find("/pipeline/recompute_layers/2: no layer named 'block9' in seed-cnn; its layers are conv1, ") == 0u,
             message);
  BOOST_TEST(config_error([] {
               train::job_config_from_json(nlohmann::json::parse(R"({"pipeline": {"recompute_layers": "conv1"}})"));
             }).find("/pipeline/recompute_layers: ") == 0u);
}

BOOST_AUTO_TEST_CASE(the_image_data_fields_round_trip_are_checked_and_must_match_on_resume) {
  train::JobConfig c;
  c.data.dataset = "image-folder";
  const auto plain = train::to_json(c);
  BOOST_TEST(!plain["data"].contains("bad_samples"));   // left out at their defaults: identities as before
  BOOST_TEST(!plain["data"].contains("normalize"));
  auto skipping = c;
  skipping.data.bad_samples = models::data::BadSamples::Skip;
  skipping.data.normalize = models::data::Normalization{{0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f}};
  const auto j = train::to_json(skipping);
  BOOST_TEST(j["data"]["bad_samples"] == "skip");
  BOOST_TEST(j["data"]["normalize"] == "0.5:0.25");
  const auto back = train::job_config_from_json(j);
  BOOST_TEST((back.data.bad_samples == models::data::BadSamples::Skip));
  BOOST_TEST((back.data.normalize == skipping.data.normalize));

  auto parse = [](const char* text) { return [text] { train::job_config_from_json(nlohmann::json::parse(text)); }; };
  BOOST_TEST(config_error(parse(R"({"data": {"bad_samples": "ignore"}})")) ==
             "/data/bad_samples: unknown bad-sample policy 'ignore'; accepted: fail, skip");
  BOOST_TEST(config_error(parse(R"({"data": {"normalize": "0.5,0.5:0.2"}})")).find(
                 "/data/normalize: '0.5,0.5:0.2' is not a normalisation: 2 values a side; expected MEAN,...:STD,...") == 0u);
  BOOST_TEST(config_error(parse(R"({"data": {"normalize": "0.5:zero"}})")).find("/data/normalize: '0.5:zero' is not a "
                                                                               "normalisation: a value is not a number") == 0u);
  BOOST_TEST(config_error(parse(R"({"data": {"normalize": "0.5:0"}})")).find("/data/normalize: '0.5:0' is not a "
                                                                            "normalisation: std 0 of channel 0") == 0u);
  BOOST_TEST(config_error(parse(R"({"data": {"normalize": [0.5, 0.25]}})")).find("/data/normalize: [0.5,0.25]; expected") == 0u);
  // A config made in code is checked too, and only the image data sets take a normalisation.
  auto zero_std = skipping;
  zero_std.data.normalize->std[2] = 0;
  BOOST_TEST(config_error([&] { train::validate(zero_std); }).find("/data/normalize: std 0 of channel 2") == 0u);
  auto mnist = skipping;
  mnist.data.dataset = "fashion-mnist";
  BOOST_TEST(config_error([&] { train::validate(mnist); }) ==
             "/data/normalize: applies to the image data sets (image-folder, shards, cifar10), not to fashion-mnist");
  BOOST_CHECK_NO_THROW(train::validate(skipping));

  // What the samples are is part of what a checkpoint's weights and data position mean.
  BOOST_TEST(train::resume_difference(plain, j) == "/data/bad_samples: absent in the checkpoint, \"skip\" now");
  auto renormalised = skipping;
  renormalised.data.normalize->mean[0] = 0.25f;
  BOOST_TEST(train::resume_difference(j, train::to_json(renormalised)) ==
             "/data/normalize: \"0.5:0.25\" in the checkpoint, \"0.25,0.5,0.5:0.25\" now");
  auto resized = c;
  resized.data.image_size = 128;
  BOOST_TEST(train::resume_difference(plain, train::to_json(resized)) == "/data/image_size: absent in the checkpoint, 128 now");
  auto unaugmented = c;
  unaugmented.data.augment = models::data::Augment::None;
  BOOST_TEST(train::resume_difference(train::to_json(unaugmented), plain) == "/data/augment: \"none\" in the checkpoint, absent now");
}

// The token of given parameter servers is a secret: no JSON form holds it, so neither a
// checkpoint's config, the identity hash nor a printed config does.
BOOST_AUTO_TEST_CASE(the_parameter_servers_token_is_never_written) {
  train::JobConfig c;
  c.ps.addresses = "127.0.0.1:9000";
  const auto hash = train::config_hash(train::to_json(c));
  c.ps.token = "s3cr3t-token-0123";
  BOOST_TEST(train::config_hash(train::to_json(c)) == hash);
  BOOST_TEST(train::to_full_json(c).dump().find("s3cr3t") == std::string::npos);
  BOOST_TEST(train::ps_config_to_json(c.ps).dump().find("s3cr3t") == std::string::npos);   // what servers get
}

BOOST_AUTO_TEST_CASE(the_identity_is_the_same_json_as_before_the_config_was_typed) {
  // Hashes of the string-typed config of earlier builds: checkpoints they wrote still resume.
  train::JobConfig c;
  BOOST_TEST(train::config_hash(train::to_json(c)) == "9cf866d5eccec393");
  c.pipeline.schedule = pipeline::ScheduleKind::Interleaved;
  c.pipeline.recompute = partition::Recompute::ExceptLast;
  c.pipeline.partition = partition::PartitionMethod::Profile;
  c.replicas.grad_compression = dp::Compression::Bf16;
  c.ps.mode = dp::UpdateMode::Bounded;
  c.ps.optimizer = dp::SparseOptimizerKind::Adagrad;
  c.optimizer.kind = models::OptimizerKind::Sgd;
  c.checkpoints.on_error = train::CheckpointErrorPolicy::Continue;
  c.numerics.precision = models::Precision::Bf16;
  c.transport = train::TransportKind::Thrift;
  c.data.synthetic_shape = {3, 32, 32};
  c.data.dataset = "synthetic";
  c.pipeline.stages = 4;
  c.optimizer.lr = 0.05;
  BOOST_TEST(train::config_hash(train::to_json(c)) == "cffcbc05fb514d4a");
  const auto j = train::to_json(c);
  BOOST_TEST(j["pipeline"]["schedule"] == "interleaved");
  BOOST_TEST(j["data"]["synthetic_shape"] == "3x32x32");
  BOOST_TEST(j["ps"]["optimizer"] == "adagrad");
  // The full form carries the resources too and reads back to the same job.
  c.resources.device_memory = std::int64_t{512} << 20;
  c.resources.devices = {kernels::Device::cpu(0), kernels::Device::cuda(1)};
  const auto full = train::to_full_json(c);
  BOOST_TEST(full["resources"]["devices"] == nlohmann::json({"cpu:0", "cuda:1"}));
  BOOST_TEST(full["resources"]["device"] == "cpu:0");
  const auto back = train::job_config_from_json(full);
  BOOST_TEST(train::to_json(back) == j);
  BOOST_TEST(back.resources.device_memory == std::int64_t{512} << 20);
  BOOST_TEST((back.resources.devices == c.resources.devices));
  BOOST_TEST(train::job_config_from_json({{"resources", {{"device_memory", "2GiB"}}}}).resources.device_memory ==
             std::int64_t{2} << 30);
}

BOOST_AUTO_TEST_CASE(tls_files_are_per_host_and_all_three_or_none) {
  train::JobConfig c;
  const auto identity = train::to_json(c);
  c.tls = {"host.pem", "host.key", "ca.pem"};
  // Per host: not part of the job's identity, but in the full form, and read back from it.
  BOOST_TEST(train::to_json(c) == identity);
  BOOST_TEST(!train::to_full_json(train::JobConfig{}).contains("tls"));
  const auto back = train::job_config_from_json(train::to_full_json(c));
  BOOST_TEST((back.tls.cert == "host.pem" && back.tls.key == "host.key" && back.tls.ca == "ca.pem"));
  BOOST_CHECK_NO_THROW(train::validate(c));
  for (const auto& [missing, path] : {std::pair{&train::TlsConfig::cert, "/tls/cert"},
                                      std::pair{&train::TlsConfig::key, "/tls/key"},
                                      std::pair{&train::TlsConfig::ca, "/tls/ca"}}) {
    auto partial = c;
    partial.tls.*missing = "";
    std::string at;
    try {
      train::validate(partial);
    } catch (const train::ConfigError& e) {
      at = e.path();
    }
    BOOST_TEST(at == path);
  }
}

BOOST_AUTO_TEST_CASE(a_resumed_job_overrides_what_may_change_and_refuses_the_rest) {
  train::JobConfig saved;
  saved.optimizer.kind = models::OptimizerKind::Sgd;
  saved.optimizer.lr = 0.1;
  saved.data.steps = 6;
  saved.checkpoints.dir = "ckpt";
  // Where it runs, for how long, where it writes: not overrides.
  auto now = saved;
  now.data.steps = 20;
  now.checkpoints.resume = "ckpt";
  now.timeouts.stage_seconds = 5;
  now.data.eval_batches = 1;
  BOOST_TEST(train::resume_overrides(train::to_json(saved), train::to_json(now)).empty());
  // The learning rate, the pipeline's shape, the numerics: overrides, each with both values.
  now.optimizer.lr = 0.5;
  now.pipeline.stages = 2;
  now.numerics.initial_loss_scale = 1024;
  const auto changes = train::resume_overrides(train::to_json(saved), train::to_json(now));
  std::vector<std::string> paths;
  for (const auto& c : changes) paths.push_back(c.path);
  BOOST_TEST((paths == std::vector<std::string>{"/numerics/initial_loss_scale", "/optimizer/lr", "/pipeline/stages"}));
  BOOST_TEST(changes[1].saved == 0.1);
  BOOST_TEST(changes[1].now == 0.5);
  // Learning rates compare after defaults: sgd's default given by hand is no change.
  saved.optimizer.lr = 0;
  now = saved;
  now.optimizer.lr = 0.01;
  BOOST_TEST(train::resume_overrides(train::to_json(saved), train::to_json(now)).empty());
  now.optimizer.lr = 0.02;
  BOOST_TEST(train::resume_overrides(train::to_json(saved), train::to_json(now)).size() == 1u);
  // What the checkpoint's tensors mean is refused by resume_difference, never reported as an override.
  now = saved;
  now.data.batch_size = 32;
  now.optimizer.momentum = 0.5;
  BOOST_TEST(train::resume_overrides(train::to_json(saved), train::to_json(now)).empty());
  BOOST_TEST(train::resume_difference(train::to_json(saved), train::to_json(now)) ==
             "/data/batch_size: 64 in the checkpoint, 32 now");
  // The servers' learning rate is in their snapshot and weights given to load are replaced by the
  // checkpoint's: neither can change on resume.
  now = saved;
  now.ps.lr = 0.5;
  BOOST_TEST(train::resume_difference(train::to_json(saved), train::to_json(now)) == "/ps/lr: 0.0 in the checkpoint, 0.5 now");
  now = saved;
  now.load_path = "w.safetensors";
  BOOST_TEST(train::resume_difference(train::to_json(saved), train::to_json(now)) ==
             "/load_path: \"\" in the checkpoint, \"w.safetensors\" now");
  // A field added later is written only when set, so an old identity stays the same.
  now = saved;
  now.recovery.max_rollbacks = 5;
  BOOST_TEST(!train::to_json(saved)["recovery"].contains("max_rollbacks"));
  BOOST_TEST(train::to_json(now)["recovery"]["max_rollbacks"] == 5);
  now = saved;
  now.recovery.update_validation = pipeline::UpdateValidation::Before;
  BOOST_TEST(!train::to_json(saved)["recovery"].contains("update_validation"));
  BOOST_TEST(train::to_json(now)["recovery"]["update_validation"] == "before");
  BOOST_TEST((train::job_config_from_json(train::to_json(now)).recovery.update_validation ==
              pipeline::UpdateValidation::Before));
}

BOOST_AUTO_TEST_CASE(the_cpu_collectives_are_in_the_identity_only_when_chosen) {
  train::JobConfig c;
  BOOST_TEST(!train::to_json(c)["replicas"].contains("cpu_collectives"));   // identities from before stay as they were
  c.replicas.cpu_collectives = dp::CpuCollectives::Links;
  const auto j = train::to_json(c);
  BOOST_TEST(j["replicas"]["cpu_collectives"] == "links");
  BOOST_TEST((train::job_config_from_json(j).replicas.cpu_collectives == dp::CpuCollectives::Links));
  BOOST_TEST(config_error([] {
               train::job_config_from_json(nlohmann::json::parse(R"({"replicas": {"cpu_collectives": "mpi"}})"));
             }) == "/replicas/cpu_collectives: unknown CPU collectives 'mpi'; accepted: auto, gloo, links");
}

// Sharded optimizer state changes no result bits with two replicas, but it is how the ranks
// reduce, so every rank must agree: part of the identity when chosen, and free to change on resume.
BOOST_AUTO_TEST_CASE(the_optimizer_state_is_in_the_identity_only_when_sharded) {
  train::JobConfig c;
  BOOST_TEST(!train::to_json(c)["replicas"].contains("optimizer_state"));
  c.replicas.optimizer_state = dp::OptimizerState::Sharded;
  const auto j = train::to_json(c);
  BOOST_TEST(j["replicas"]["optimizer_state"] == "sharded");
  BOOST_TEST((train::job_config_from_json(j).replicas.optimizer_state == dp::OptimizerState::Sharded));
  BOOST_TEST(train::resume_difference(train::to_json(train::JobConfig{}), j).empty());
  BOOST_TEST(config_error([] {
               train::job_config_from_json(nlohmann::json::parse(R"({"replicas": {"optimizer_state": "zero3"}})"));
             }) == "/replicas/optimizer_state: unknown optimizer state 'zero3'; accepted: replicated, sharded");
}

BOOST_AUTO_TEST_CASE(validate_names_the_first_field_out_of_range_by_its_path) {
  train::JobConfig c;
  train::validate(c);
  auto bad = [](auto change) {
    train::JobConfig c;
    change(c);
    return config_error([&] { train::validate(c); });
  };
  BOOST_TEST(bad([](auto& c) { c.optimizer.lr = -1; }) == "/optimizer/lr: -1; must be >= 0");
  BOOST_TEST(bad([](auto& c) { c.replicas.replicas = 0; }) == "/replicas/replicas: 0; must be in [1, 4096]");
  BOOST_TEST(bad([](auto& c) { c.data.batch_size = 0; }) == "/data/batch_size: 0; must be >= 1");
  BOOST_TEST(bad([](auto& c) { c.data.steps = 0; }) == "/data/steps: 0; must be >= 1 (or -1: not set)");
  BOOST_TEST(bad([](auto& c) { c.timeouts.stage_seconds = 0; }) == "/timeouts/stage_seconds: 0; must be > 0");
  BOOST_TEST(bad([](auto& c) { c.model.embedding_rows = {10, 0}; }) == "/model/embedding_rows/1: 0; must be in [1, 16777216]");
  BOOST_TEST(bad([](auto& c) { c.resources.loader_threads = -1; }) == "/resources/loader_threads: -1; must be >= 0");
  BOOST_TEST(bad([](auto& c) { c.resources.prefetch_batches = -2; }) == "/resources/prefetch_batches: -2; must be in [0, 64]");
  // Thread counts are held to what the machine can start (a crash inside libgomp before).
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string most = std::to_string(4 * hardware) + " (4 per hardware thread; this machine has " +
                           std::to_string(hardware) + ")";
  BOOST_TEST(bad([](auto& c) { c.resources.threads = 65536; }) == "/resources/threads: 65536; at most " + most);
  BOOST_TEST(bad([](auto& c) { c.resources.loader_threads = 32768; }) == "/resources/loader_threads: 32768; at most " + most);
  BOOST_TEST(bad([=](auto& c) { c.resources.threads = 4 * hardware; }).empty());
  BOOST_TEST(bad([](auto& c) { c.recovery.max_rollbacks = -1; }) == "/recovery/max_rollbacks: -1; must be >= 0");
  // plan_job validates first.
  c.recovery.max_bad_steps = 0;
  BOOST_CHECK_THROW(train::plan_job(c), train::ConfigError);
}

BOOST_AUTO_TEST_SUITE_END()
