#include "train/job_config.h"

#include <cstdio>

#include "core/error.h"

namespace pw::train {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ModelConfig, name, width, embedding_rows, embedding_dim)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DataConfig, dataset, synthetic_shape, synthetic_size,
                                                batch_size, epochs, steps, eval_batches)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(PipelineConfig, stages, micro_batches, schedule, chunks, split,
                                                partition, recompute, schedule_file)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ReplicaConfig, replicas, bucket_bytes, grad_compression,
                                                sync_batch_norm)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ParameterServerConfig, servers, addresses, mode, staleness,
                                                optimizer, lr, dir, admit_after, max_rows, row_ttl)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(OptimizerSettings, kind, lr, momentum, weight_decay)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TimeoutConfig, stage_seconds, heartbeat_seconds, startup_seconds)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CheckpointConfig, dir, every_steps, every_seconds, keep, on_error,
                                                resume)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RecoveryConfig, max_bad_steps, rollback_lr_factor, clip_grad_norm)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NumericsConfig, precision, loss_scale, initial_loss_scale,
                                                loss_scale_window, allow_tf32, deterministic)

namespace {

nlohmann::json program_model_json(const partition::ModelDescription& m) {
  nlohmann::json j;
  j["name"] = m.name;
  j["sample_shape"] = m.sample_shape;
  j["num_classes"] = m.num_classes;
  std::vector<std::string> layers;
  for (const auto& l : m.layers) layers.push_back(l.name);
  j["layers"] = layers;
  j["split_points"] = m.split_points;
  nlohmann::json tied = nlohmann::json::array();
  for (const auto& t : m.tied) tied.push_back({{"name", t.name}, {"parameters", t.parameters}});
  j["tied"] = tied;
  return j;
}

}  // namespace

nlohmann::json to_json(const JobConfig& c) {
  nlohmann::json j;
  j["model"] = c.model;
  if (c.program_model && !c.program_model->layers.empty()) j["program_model"] = program_model_json(*c.program_model);
  j["data"] = c.data;
  j["pipeline"] = c.pipeline;
  j["replicas"] = c.replicas;
  j["ps"] = c.ps;
  j["optimizer"] = c.optimizer;
  j["timeouts"] = c.timeouts;
  j["checkpoints"] = c.checkpoints;
  j["recovery"] = c.recovery;
  j["numerics"] = c.numerics;
  j["seed"] = c.seed;
  j["transport"] = c.transport;
  j["load_path"] = c.load_path;
  return j;
}

JobConfig job_config_from_json(const nlohmann::json& j) {
  JobConfig c;
  try {
    if (j.contains("model")) c.model = j.at("model").get<ModelConfig>();
    if (j.contains("data")) c.data = j.at("data").get<DataConfig>();
    if (j.contains("pipeline")) c.pipeline = j.at("pipeline").get<PipelineConfig>();
    if (j.contains("replicas")) c.replicas = j.at("replicas").get<ReplicaConfig>();
    if (j.contains("ps")) c.ps = j.at("ps").get<ParameterServerConfig>();
    if (j.contains("optimizer")) c.optimizer = j.at("optimizer").get<OptimizerSettings>();
    if (j.contains("timeouts")) c.timeouts = j.at("timeouts").get<TimeoutConfig>();
    if (j.contains("checkpoints")) c.checkpoints = j.at("checkpoints").get<CheckpointConfig>();
    if (j.contains("recovery")) c.recovery = j.at("recovery").get<RecoveryConfig>();
    if (j.contains("numerics")) c.numerics = j.at("numerics").get<NumericsConfig>();
    if (j.contains("seed")) c.seed = j.at("seed").get<std::uint64_t>();
    if (j.contains("transport")) c.transport = j.at("transport").get<std::string>();
    if (j.contains("load_path")) c.load_path = j.at("load_path").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("job config: ") + e.what());
  }
  PW_INPUT_CHECK(!j.contains("program_model"), "job config: a program's own model cannot be read from JSON; "
                                               "the program builds it in code");
  return c;
}

nlohmann::json ps_config_to_json(const ParameterServerConfig& ps) { return ps; }

ParameterServerConfig ps_config_from_json(const nlohmann::json& j) {
  try {
    return j.get<ParameterServerConfig>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("parameter-server config: ") + e.what());
  }
}

std::string config_hash(const nlohmann::json& identity) {
  std::uint64_t h = 1469598103934665603ull;   // FNV-1a
  for (unsigned char ch : identity.dump()) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

std::string first_difference(const nlohmann::json& mine, const nlohmann::json& theirs) {
  const auto a = mine.flatten();
  const auto b = theirs.flatten();
  for (auto it = a.begin(); it != a.end(); ++it) {
    const auto other = b.find(it.key());
    if (other == b.end()) return it.key() + ": " + it.value().dump() + " here, absent there";
    if (*other != it.value()) return it.key() + ": " + it.value().dump() + " here, " + other->dump() + " there";
  }
  for (auto it = b.begin(); it != b.end(); ++it)
    if (a.find(it.key()) == a.end()) return it.key() + ": absent here, " + it.value().dump() + " there";
  return "";
}

std::string resume_difference(const nlohmann::json& saved, const nlohmann::json& mine) {
  // What a checkpoint's tensors and data position mean: the rest (shape, steps, timeouts,
  // checkpoint settings, the learning rate, which the checkpoint carries) may change.
  static const char* const kMustMatch[] = {"/model",     "/program_model",         "/data/dataset",
                                           "/data/synthetic_shape", "/data/synthetic_size", "/data/batch_size",
                                           "/seed",      "/optimizer/kind",        "/optimizer/momentum",
                                           "/optimizer/weight_decay", "/ps/servers", "/ps/mode",
                                           "/ps/optimizer"};
  auto flat = [](const nlohmann::json& j, const char* field) {
    const nlohmann::json::json_pointer at(field);
    nlohmann::json out = nlohmann::json::object();
    if (!j.contains(at)) return out;
    const auto& v = j.at(at);
    if (!v.is_structured()) {
      out[field] = v;
      return out;
    }
    const auto flattened = v.flatten();
    for (const auto& [key, value] : flattened.items()) out[std::string(field) + key] = value;
    return out;
  };
  // A program model's split is its pipeline's shape, as --split is a zoo model's: not what its tensors mean.
  auto without_split = [](nlohmann::json j) {
    if (j.contains("program_model") && j["program_model"].is_object()) j["program_model"].erase("split_points");
    return j;
  };
  const auto saved_model = without_split(saved), my_model = without_split(mine);
  for (const char* field : kMustMatch) {
    const auto a = flat(saved_model, field), b = flat(my_model, field);
    for (const auto& [key, value] : a.items())
      if (!b.contains(key) || b.at(key) != value)
        return key + ": " + value.dump() + " in the checkpoint, " + (b.contains(key) ? b.at(key).dump() : "absent") + " now";
    for (const auto& [key, value] : b.items())
      if (!a.contains(key)) return key + ": absent in the checkpoint, " + value.dump() + " now";
  }
  return "";
}

double effective_lr(const OptimizerSettings& o) {
  if (o.lr > 0) return o.lr;
  return o.kind == "adam" ? 1e-3 : 1e-2;
}

}  // namespace pw::train
