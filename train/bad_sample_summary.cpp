#include "train/bad_sample_summary.h"

#include <string>

#include "dataparallel/topology.h"
#include "models/data/dataset.h"

namespace pw::train {
namespace {

using models::data::BadSampleLog;
using models::data::Split;

std::string key_of(int rank) { return "data/bad_samples/" + std::to_string(rank); }

nlohmann::json log_json(const BadSampleLog& log) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [key, name] : log.names())
    j.push_back({key.first == Split::Train ? 0 : 1, key.second, name});
  return j;
}

std::map<BadSampleLog::Key, std::string> log_of(const nlohmann::json& j) {
  std::map<BadSampleLog::Key, std::string> out;
  for (const auto& e : j)
    out.emplace(BadSampleLog::Key{e.at(0).get<int>() == 0 ? Split::Train : Split::Test, e.at(1).get<std::int64_t>()},
                e.at(2).get<std::string>());
  return out;
}

}  // namespace

std::optional<nlohmann::json> gather_bad_samples(Engine& engine, const BadSampleLog& log, rpc::Deadline deadline) {
  if (!models::data::reads_inputs(engine.data_parts())) return std::nullopt;
  auto& links = engine.links();
  if (engine.rank() != 0) {
    links.store().set(key_of(engine.rank()), log_json(log).dump());
    return std::nullopt;
  }
  BadSampleLog all;
  all.merge(log.names());
  const dp::Topology topology(engine.plan().schedule.stages, engine.plan().replicas());
  for (const int rank : topology.stage_group(0))
    if (rank != 0) all.merge(log_of(nlohmann::json::parse(links.get(key_of(rank), deadline))));
  return nlohmann::json{{"count", all.count()}, {"first", all.first(kBadSamplesNamed)}};
}

}  // namespace pw::train
