#include "train/job_config.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/error.h"
#include "core/units.h"
#include "models/data/dataset.h"
#include "models/data/normalization.h"

namespace pw::train {

namespace {

// Byte sizes and sample shapes have a text form in JSON ("512MiB", "1x28x28"); these wrappers
// pick it in the field lists below.
struct ByteSize {
  std::int64_t& bytes;
};
struct ShapeText {
  std::vector<std::int64_t>& shape;
};
// An image normalisation as "MEAN,...:STD,..." (models/data/normalization.h); written only when set.
struct NormalizationText {
  std::optional<models::data::Normalization>& value;
};

// /pipeline/recompute: a mode's name for the whole job, or a list with one entry (none or all) per
// stage. The list is written only when given, so the identity of a job-wide mode is as before.
struct RecomputeChoice {
  partition::Recompute& mode;
  std::vector<partition::Recompute>& per_stage;
};

// A field added after identities were first hashed: written only when it differs from its
// default, so the identity (and the hash) of a config that leaves it alone is as before.
template <typename T>
struct WrittenUnlessDefault {
  T& value;
  T fallback;
};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out;
  for (const auto d : shape) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

// The one list of every field of each section: the JSON writer and the reader walk it, so a field
// is named once. Writers get the section through const_cast and only read it.
template <typename F>
void fields(ModelConfig& c, F&& f) {
  f("name", c.name), f("width", c.width), f("embedding_rows", c.embedding_rows), f("embedding_dim", c.embedding_dim);
}
template <typename F>
void fields(DataConfig& c, F&& f) {
  f("dataset", c.dataset), f("synthetic_shape", ShapeText{c.synthetic_shape}), f("synthetic_size", c.synthetic_size);
  f("batch_size", c.batch_size), f("epochs", c.epochs), f("steps", c.steps), f("eval_batches", c.eval_batches);
  f("image_size", WrittenUnlessDefault<std::int64_t>{c.image_size, 224});
  f("augment", WrittenUnlessDefault<models::data::Augment>{c.augment, models::data::Augment::ImageNet});
  f("bad_samples", WrittenUnlessDefault<models::data::BadSamples>{c.bad_samples, models::data::BadSamples::Fail});
  f("normalize", NormalizationText{c.normalize});
}
template <typename F>
void fields(PipelineConfig& c, F&& f) {
  f("stages", c.stages), f("micro_batches", c.micro_batches), f("schedule", c.schedule), f("chunks", c.chunks);
  f("split", c.split), f("partition", c.partition), f("recompute", RecomputeChoice{c.recompute, c.recompute_stages});
  f("recompute_layers", WrittenUnlessDefault<std::vector<std::string>>{c.recompute_layers, {}});
  f("schedule_file", c.schedule_file);
}
template <typename F>
void fields(ReplicaConfig& c, F&& f) {
  f("replicas", c.replicas), f("bucket_bytes", c.bucket_bytes), f("grad_compression", c.grad_compression);
  f("sync_batch_norm", c.sync_batch_norm);
  f("cpu_collectives", WrittenUnlessDefault<dp::CpuCollectives>{c.cpu_collectives, dp::CpuCollectives::Auto});
  f("optimizer_state",
    WrittenUnlessDefault<dp::OptimizerState>{c.optimizer_state, dp::OptimizerState::Replicated});
}
template <typename F>
void fields(ParameterServerConfig& c, F&& f) {
  f("servers", c.servers), f("addresses", c.addresses), f("mode", c.mode), f("staleness", c.staleness);
  f("optimizer", c.optimizer), f("lr", c.lr), f("dir", c.dir), f("admit_after", c.admit_after);
  f("max_rows", c.max_rows), f("row_ttl", c.row_ttl);
}
template <typename F>
void fields(OptimizerSettings& c, F&& f) {
  f("kind", c.kind), f("lr", c.lr), f("momentum", c.momentum), f("weight_decay", c.weight_decay);
  f("offload", WrittenUnlessDefault<models::OptimizerOffload>{c.offload, models::OptimizerOffload::None});
}
template <typename F>
void fields(TimeoutConfig& c, F&& f) {
  f("stage_seconds", c.stage_seconds), f("heartbeat_seconds", c.heartbeat_seconds);
  f("startup_seconds", c.startup_seconds);
}
template <typename F>
void fields(CheckpointConfig& c, F&& f) {
  f("dir", c.dir), f("every_steps", c.every_steps), f("every_seconds", c.every_seconds), f("keep", c.keep);
  f("on_error", c.on_error), f("resume", c.resume);
}
template <typename F>
void fields(RecoveryConfig& c, F&& f) {
  f("max_bad_steps", c.max_bad_steps), f("rollback_lr_factor", c.rollback_lr_factor),
      f("max_rollbacks", WrittenUnlessDefault<int>{c.max_rollbacks, 3});
  f("clip_grad_norm", c.clip_grad_norm);
  f("update_validation",
    WrittenUnlessDefault<pipeline::UpdateValidation>{c.update_validation, pipeline::UpdateValidation::Auto});
}
template <typename F>
void fields(NumericsConfig& c, F&& f) {
  f("precision", c.precision), f("loss_scale", c.loss_scale), f("initial_loss_scale", c.initial_loss_scale);
  f("loss_scale_window", c.loss_scale_window), f("allow_tf32", c.allow_tf32), f("deterministic", c.deterministic);
}
template <typename F>
void fields(Resources& c, F&& f) {
  f("device", c.device), f("devices", c.devices), f("threads", c.threads);
  f("prefetch_batches", c.prefetch_batches), f("loader_threads", c.loader_threads);
  f("device_memory", ByteSize{c.device_memory}), f("data_dir", c.data_dir);
}
template <typename F>
void fields(TlsConfig& c, F&& f) {
  f("cert", c.cert), f("key", c.key), f("ca", c.ca), f("plain_links", c.plain_links);
}
// The job's sections and top-level scalars, in one list too.
template <typename F>
void sections(JobConfig& c, F&& f) {
  f("model", c.model), f("data", c.data), f("pipeline", c.pipeline), f("replicas", c.replicas), f("ps", c.ps);
  f("optimizer", c.optimizer), f("timeouts", c.timeouts), f("checkpoints", c.checkpoints), f("recovery", c.recovery);
  f("numerics", c.numerics), f("seed", c.seed), f("transport", c.transport), f("load_path", c.load_path);
}

template <typename T>
nlohmann::json value_json(const T& v) {
  if constexpr (std::is_enum_v<T>) return std::string(enum_name(v));
  else return v;
}
nlohmann::json value_json(const ShapeText& v) { return shape_text(v.shape); }
nlohmann::json value_json(const NormalizationText& v) { return v.value ? models::data::normalization_text(*v.value) : ""; }
nlohmann::json value_json(const ByteSize& v) { return v.bytes; }
nlohmann::json value_json(const RecomputeChoice& v) {
  if (v.per_stage.empty()) return std::string(enum_name(v.mode));
  nlohmann::json j = nlohmann::json::array();
  for (const auto r : v.per_stage) j.push_back(std::string(enum_name(r)));
  return j;
}
nlohmann::json value_json(const kernels::Device& v) { return v.str(); }
nlohmann::json value_json(const std::vector<kernels::Device>& v) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& d : v) j.push_back(d.str());
  return j;
}
nlohmann::json value_json(const std::optional<dp::SparseOptimizerKind>& v) {
  return v ? std::string(enum_name(*v)) : std::string();
}

template <typename T>
bool left_out(const T&) { return false; }
template <typename T>
bool left_out(const WrittenUnlessDefault<T>& v) { return v.value == v.fallback; }
bool left_out(const NormalizationText& v) { return !v.value; }
template <typename T>
nlohmann::json value_json(const WrittenUnlessDefault<T>& v) { return value_json(v.value); }

template <typename Section>
nlohmann::json section_json(const Section& section) {
  nlohmann::json j = nlohmann::json::object();
  fields(const_cast<Section&>(section), [&](const char* name, const auto& value) {
    if (!left_out(value)) j[name] = value_json(value);
  });
  return j;
}

[[noreturn]] void bad(const std::string& path, const std::string& problem) { throw ConfigError(path, problem); }

// What a JSON value is, for a message: a list or an object by kind only (a dump of one could be
// megabytes, and nlohmann's dump recurses; only a short list of numbers is shown), a scalar by its
// text, cut when long.
std::string kind_of(const nlohmann::json& j) {
  constexpr std::size_t kShown = 64;
  if (j.is_array()) {
    // A short flat list of numbers is shown as it is ("[1,2]"); any other by its length.
    const bool flat = j.size() <= 8 && std::all_of(j.begin(), j.end(), [](const auto& v) { return v.is_number() || v.is_boolean(); });
    if (flat) return j.dump();
    return "a list of " + std::to_string(j.size()) + (j.size() == 1 ? " entry" : " entries");
  }
  if (j.is_object()) return j.empty() ? "an empty object" : "an object";
  if (j.is_null()) return "null";
  if (j.is_string()) {
    const auto& text = j.get_ref<const std::string&>();
    const auto shown = [](const std::string& t) {
      return nlohmann::json(t).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    };
    if (text.size() <= kShown) return "the text " + shown(text);
    std::size_t cut = kShown;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;   // not inside a UTF-8 character
    return "the text " + shown(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
  }
  return j.dump();
}

void read_value(const nlohmann::json& j, const std::string& path, std::string& out) {
  if (!j.is_string()) bad(path, kind_of(j) + "; expected a string");
  out = j.get<std::string>();
}
void read_value(const nlohmann::json& j, const std::string& path, bool& out) {
  if (!j.is_boolean()) bad(path, kind_of(j) + "; expected true or false");
  out = j.get<bool>();
}
void read_value(const nlohmann::json& j, const std::string& path, double& out) {
  if (!j.is_number()) bad(path, kind_of(j) + "; expected a number");
  out = j.get<double>();
}
template <typename Int>
  requires std::is_integral_v<Int>
void read_value(const nlohmann::json& j, const std::string& path, Int& out) {
  if (!j.is_number_integer()) bad(path, kind_of(j) + "; expected a whole number");
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<Int>::max())) bad(path, j.dump() + "; out of range");
    out = static_cast<Int>(v);
  } else {
    const auto v = j.get<std::int64_t>();
    if (v < static_cast<std::int64_t>(std::numeric_limits<Int>::min()) ||
        (v > 0 && static_cast<std::uint64_t>(v) > static_cast<std::uint64_t>(std::numeric_limits<Int>::max())))
      bad(path, j.dump() + "; out of range");
    out = static_cast<Int>(v);
  }
}
template <typename E>
  requires std::is_enum_v<E>
void read_value(const nlohmann::json& j, const std::string& path, E& out) {
  if (!j.is_string()) bad(path, kind_of(j) + "; expected one of " + enum_choices<E>());
  try {
    out = parse_enum<E>(j.get<std::string>());
  } catch (const InputError& e) {
    bad(path, e.what());
  }
}
void read_value(const nlohmann::json& j, const std::string& path, std::optional<dp::SparseOptimizerKind>& out) {
  if (j.is_string() && j.get<std::string>().empty()) {
    out.reset();
    return;
  }
  dp::SparseOptimizerKind kind{};
  read_value(j, path, kind);
  out = kind;
}
void read_value(const nlohmann::json& j, const std::string& path, kernels::Device& out) {
  if (!j.is_string()) bad(path, kind_of(j) + "; expected a device such as \"cpu:0\" or \"cuda:1\"");
  try {
    out = kernels::Device::parse(j.get<std::string>());
  } catch (const InputError& e) {
    bad(path, e.what());
  }
}
template <typename T>
void read_value(const nlohmann::json& j, const std::string& path, std::vector<T>& out) {
  if (!j.is_array()) bad(path, kind_of(j) + "; expected a list");
  out.clear();
  for (std::size_t i = 0; i < j.size(); ++i) read_value(j[i], path + "/" + std::to_string(i), out.emplace_back());
}
void read_value(const nlohmann::json& j, const std::string& path, ShapeText out) {
  if (!j.is_string()) bad(path, kind_of(j) + "; expected CxHxW, e.g. \"3x224x224\"");
  try {
    out.shape = models::data::parse_sample_shape(j.get<std::string>());
  } catch (const InputError& e) {
    bad(path, e.what());
  }
}
void read_value(const nlohmann::json& j, const std::string& path, NormalizationText out) {
  if (!j.is_string()) bad(path, kind_of(j) + "; expected \"MEAN,...:STD,...\", e.g. \"0.485,0.456,0.406:0.229,0.224,0.225\"");
  if (j.get<std::string>().empty()) {
    out.value.reset();
    return;
  }
  try {
    out.value = models::data::parse_normalization(j.get<std::string>());
  } catch (const InputError& e) {
    bad(path, e.what());
  }
}
void read_value(const nlohmann::json& j, const std::string& path, ByteSize out) {
  if (j.is_number_integer()) return read_value(j, path, out.bytes);
  if (!j.is_string()) bad(path, kind_of(j) + "; expected a byte count or a size such as \"512MiB\"");
  try {
    out.bytes = parse_bytes(j.get<std::string>());
  } catch (const InputError& e) {
    bad(path, e.what());
  }
}

void read_value(const nlohmann::json& j, const std::string& path, RecomputeChoice out) {
  const std::string accepted = "; expected one of " + enum_choices<partition::Recompute>() +
                               ", or a list with one entry per stage, each none or all";
  if (j.is_string()) {
    read_value(j, path, out.mode);
    out.per_stage.clear();
    return;
  }
  if (!j.is_array() || j.empty()) bad(path, kind_of(j) + accepted);
  std::vector<partition::Recompute> per_stage;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const auto& entry = j[i];
    if (!entry.is_string() || (entry.get<std::string>() != "none" && entry.get<std::string>() != "all"))
      bad(path + "/" + std::to_string(i), kind_of(entry) + "; expected none or all (one entry per stage)");
    per_stage.push_back(entry.get<std::string>() == "all" ? partition::Recompute::All : partition::Recompute::None);
  }
  out.mode = partition::Recompute::None;
  out.per_stage = std::move(per_stage);
}

template <typename T>
void read_value(const nlohmann::json& j, const std::string& path, WrittenUnlessDefault<T> out) {
  read_value(j, path, out.value);
}

// ConfigError for the first key of `j` not in `known`: "PATH/KEY: unknown field; <owner>a, b, c".
void refuse_unknown_fields(const nlohmann::json& j, const std::string& path, const std::vector<std::string>& known,
                           const std::string& owner) {
  for (const auto& [key, value] : j.items())
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string accepted;
      for (const auto& k : known) accepted += (accepted.empty() ? "" : ", ") + k;
      bad(path + "/" + key, "unknown field; " + owner + accepted);
    }
}

template <typename Section>
void read_section(const nlohmann::json& j, const std::string& path, Section& section) {
  if (!j.is_object()) bad(path, kind_of(j) + "; expected an object");
  std::vector<std::string> known;
  fields(section, [&](const char* name, auto&& value) {
    known.emplace_back(name);
    if (const auto it = j.find(name); it != j.end()) read_value(*it, path + "/" + name, value);
  });
  refuse_unknown_fields(j, path, known, path.substr(1) + " has ");
}

template <typename T>
void read_section_or_value(const nlohmann::json& j, const std::string& path, T& out) {
  if constexpr (std::is_class_v<T> && !std::is_same_v<T, std::string>) read_section(j, path, out);
  else read_value(j, path, out);
}

template <typename T>
nlohmann::json section_or_value_json(const T& v) {
  if constexpr (std::is_class_v<T> && !std::is_same_v<T, std::string>) return section_json(v);
  else return value_json(v);
}

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
  // Only a program's own loss is named, so the identity of a model without one is as before.
  if (m.loss || !m.loss_name.empty()) j["loss"] = m.loss_name.empty() ? "program" : m.loss_name;
  return j;
}

}  // namespace

nlohmann::json to_json(const JobConfig& c) {
  nlohmann::json j;
  sections(const_cast<JobConfig&>(c), [&](const char* name, const auto& value) { j[name] = section_or_value_json(value); });
  if (c.program_model && !c.program_model->layers.empty()) j["program_model"] = program_model_json(*c.program_model);
  if (c.program_data) j["data"]["dataset"] = std::string(kProgramDataPrefix) + c.program_data->name;
  return j;
}

nlohmann::json to_full_json(const JobConfig& c) {
  auto j = to_json(c);
  j.erase("program_model");
  j["resources"] = section_json(c.resources);
  if (c.tls.enabled() || c.tls.plain_links) j["tls"] = section_json(c.tls);
  return j;
}

JobConfig job_config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigError("/", kind_of(j) + "; a job config is a JSON object");
  if (j.contains("data") && j["data"].is_object() && j["data"].contains("dataset") && j["data"]["dataset"].is_string() &&
      j["data"]["dataset"].get<std::string>().rfind(kProgramDataPrefix, 0) == 0)
    throw ConfigError("/data/dataset", j["data"]["dataset"].get<std::string>() +
                                           ": a program's own data set cannot be read from JSON; the program opens it in code");
  PW_INPUT_CHECK(!j.contains("program_model"), "job config: a program's own model cannot be read from JSON; "
                                               "the program builds it in code");
  JobConfig c;
  std::vector<std::string> known{"resources", "tls"};
  sections(c, [&](const char* name, auto& value) {
    known.emplace_back(name);
    if (const auto it = j.find(name); it != j.end()) read_section_or_value(*it, std::string("/") + name, value);
  });
  if (const auto it = j.find("resources"); it != j.end()) read_section(*it, "/resources", c.resources);
  if (const auto it = j.find("tls"); it != j.end()) read_section(*it, "/tls", c.tls);
  refuse_unknown_fields(j, "", known, "a job config has ");
  return c;
}

nlohmann::json ps_config_to_json(const ParameterServerConfig& ps) { return section_json(ps); }

ParameterServerConfig ps_config_from_json(const nlohmann::json& j) {
  ParameterServerConfig ps;
  read_section(j, "/ps", ps);
  return ps;
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
  static const char* const kMustMatch[] = {"/model",           "/program_model",       "/data/dataset",
                                           "/data/synthetic_shape", "/data/synthetic_size", "/data/batch_size",
                                           "/data/image_size", "/data/augment",         "/data/bad_samples",
                                           "/data/normalize",  "/seed",                "/optimizer/kind",
                                           "/optimizer/momentum", "/optimizer/weight_decay", "/ps/servers",
                                           "/ps/mode",         "/ps/optimizer",        "/ps/lr",
                                           "/load_path"};
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

std::vector<ResumeOverride> resume_overrides(const nlohmann::json& saved, const nlohmann::json& mine) {
  // Not the job's settings but where it runs, for how long and where it writes; and the fields
  // resume_difference holds equal.
  static const char* const kNotOverrides[] = {"/data/steps", "/data/epochs", "/data/eval_batches", "/timeouts",
                                              "/checkpoints", "/ps/addresses", "/ps/dir", "/transport",
                                              "/model", "/program_model", "/data/dataset", "/data/synthetic_shape",
                                              "/data/synthetic_size", "/data/batch_size", "/data/image_size",
                                              "/data/augment", "/data/bad_samples", "/data/normalize", "/seed",
                                              "/optimizer/kind", "/optimizer/momentum", "/optimizer/weight_decay",
                                              "/ps/servers", "/ps/mode", "/ps/optimizer", "/ps/lr", "/load_path"};
  auto skipped = [](const std::string& key) {
    for (const std::string prefix : kNotOverrides)
      if (key == prefix || key.rfind(prefix + "/", 0) == 0) return true;
    return false;
  };
  auto with_effective_lr = [](nlohmann::json j) {
    const nlohmann::json::json_pointer lr("/optimizer/lr"), kind("/optimizer/kind");
    if (j.contains(lr) && j.at(lr).is_number() && j.at(lr).get<double>() <= 0.0) {
      const bool adam = !j.contains(kind) || j.at(kind) == std::string(enum_name(models::OptimizerKind::Adam));
      j[lr] = adam ? 1e-3 : 1e-2;
    }
    return j;
  };
  const auto a = with_effective_lr(saved).flatten(), b = with_effective_lr(mine).flatten();
  std::vector<ResumeOverride> out;
  for (const auto& [key, value] : b.items()) {
    if (skipped(key)) continue;
    const auto other = a.find(key);
    // A field the checkpoint's job did not have yet (an older pipewright) is not an override.
    if (other == a.end() || *other == value) continue;
    out.push_back({key, *other, value});
  }
  return out;
}

double effective_lr(const OptimizerSettings& o) {
  if (o.lr > 0) return o.lr;
  return o.kind == models::OptimizerKind::Adam ? 1e-3 : 1e-2;
}

}  // namespace pw::train
