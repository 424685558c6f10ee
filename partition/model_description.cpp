#include "partition/model_description.h"

#include <map>

#include <charconv>
#include <sstream>

#include "core/error.h"

namespace pw::partition {

ModelDescription describe(const models::ModelSpec& spec) {
  ModelDescription d;
  d.name = spec.name;
  d.sample_shape = spec.sample_shape;
  d.num_classes = spec.num_classes;
  d.layers = spec.layers;
  return d;
}

std::string format_split_points(const std::vector<int>& split_points) {
  std::ostringstream out;
  for (std::size_t i = 0; i < split_points.size(); ++i) out << (i > 0 ? "," : "") << split_points[i];
  return out.str();
}

void check_stage_count(int layer_count, int stages, const std::string& model_name) {
  PW_INPUT_CHECK(stages >= 1, stages << " stages; need at least 1");
  PW_INPUT_CHECK(stages <= layer_count, stages << " stages: " << model_name << " has only " << layer_count
                                               << " layers, so at most " << layer_count << " stages");
}

Partition split_at(int layer_count, const std::vector<int>& split_points, const SplitLabels& labels) {
  PW_CHECK(layer_count >= 1, "a model needs layers");
  const std::string given = (labels.label.empty() ? "" : labels.label + " ") + format_split_points(split_points);
  const auto stages = static_cast<int>(split_points.size()) + 1;
  PW_INPUT_CHECK(stages <= layer_count, given << ": " << stages << " stages but " << labels.model << " has only "
                                              << layer_count << " layers; give at most " << layer_count - 1
                                              << " split points");
  int previous = 0;
  for (const int point : split_points) {
    PW_INPUT_CHECK(point > previous && point < layer_count,
                   given << ": split points must be strictly increasing layer indices in 1.." << layer_count - 1 << " ("
                         << labels.model << " has " << layer_count << " layers)");
    previous = point;
  }
  Partition partition;
  int begin = 0;
  for (const int point : split_points) {
    partition.push_back({begin, point});
    begin = point;
  }
  partition.push_back({begin, layer_count});
  return partition;
}

Partition explicit_partition(const ModelDescription& model) {
  return split_at(model.layer_count(), model.split_points, {"split points", model.name});
}

std::vector<int> parse_split_points(std::string_view text) {
  std::vector<int> points;
  const auto bad = [&] {
    return InputError("bad split points '" + std::string(text) + "'; expected comma-separated layer indices, e.g. 3,7,12");
  };
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const auto item = text.substr(pos, comma - pos);
    int value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size()) throw bad();
    points.push_back(value);
    pos = comma + 1;
  }
  return points;
}

void check_partition(const Partition& partition, int layer_count) {
  PW_CHECK(!partition.empty(), "empty partition");
  int expected = 0;
  for (const auto& stage : partition) {
    PW_CHECK(stage.begin == expected && stage.end > stage.begin,
             "partition stage [" << stage.begin << ", " << stage.end << ") does not continue at layer " << expected);
    expected = stage.end;
  }
  PW_CHECK(expected == layer_count, "partition ends at layer " << expected << " of " << layer_count);
}

std::unique_ptr<models::Sequential> build_stage(const ModelDescription& model, StageRange range, std::uint64_t seed) {
  PW_CHECK(range.begin >= 0 && range.begin < range.end && range.end <= model.layer_count(),
           "stage [" << range.begin << ", " << range.end << ") outside " << model.name << "'s "
                     << model.layer_count() << " layers");
  auto stage = std::make_unique<models::Sequential>();
  for (int i = range.begin; i < range.end; ++i) {
    const auto& spec = model.layers[static_cast<std::size_t>(i)];
    stage->add(spec.name, spec.build());
  }
  stage->initialize(seed);
  return stage;
}

int owning_layer(const ModelDescription& model, const std::string& parameter) {
  int best = -1;
  std::size_t best_length = 0;
  for (int i = 0; i < model.layer_count(); ++i) {
    const auto& name = model.layers[static_cast<std::size_t>(i)].name;
    const bool prefixes = parameter.size() > name.size() && parameter.compare(0, name.size(), name) == 0 &&
                          parameter[name.size()] == '.';
    if (prefixes && name.size() > best_length) {
      best = i;
      best_length = name.size();
    }
  }
  PW_INPUT_CHECK(best >= 0, "tied parameter '" << parameter << "' belongs to no layer of " << model.name
                                               << "; expected <layer name>.<parameter>, e.g. "
                                               << (model.layers.empty() ? "fc.weight" : model.layers.front().name + ".weight"));
  return best;
}

void check_tied(const ModelDescription& model) {
  // A parameter listed twice would have its gradient counted twice; one in two ties would make
  // the copies drift apart, as the ties are reduced one after the other.
  std::map<std::string, std::string> tie_of;
  for (const auto& tied : model.tied) {
    PW_INPUT_CHECK(tied.parameters.size() >= 2,
                   "tied weight '" << tied.name << "' names " << tied.parameters.size() << " parameter(s); a tie needs at least 2");
    for (const auto& parameter : tied.parameters) {
      const auto [it, fresh] = tie_of.emplace(parameter, tied.name);
      PW_INPUT_CHECK(fresh, "parameter '" << parameter << "' appears twice in tied weights ('" << it->second << "' and '"
                                          << tied.name << "'); list each parameter in one tie, once");
    }
    kernels::Shape first_shape;
    for (const auto& parameter : tied.parameters) {
      const int index = owning_layer(model, parameter);
      const auto& spec = model.layers[static_cast<std::size_t>(index)];
      auto layer = spec.build();
      const models::Parameter* found = nullptr;
      for (const auto& [name, p] : layer->named_parameters(spec.name + ".")) {
        if (name == parameter) found = p;
      }
      PW_INPUT_CHECK(found != nullptr, "tied weight '" << tied.name << "': layer " << spec.name << " has no parameter '"
                                                       << parameter << "'");
      if (first_shape.empty()) first_shape = found->value.shape();
      PW_INPUT_CHECK(found->value.shape() == first_shape,
                     "tied weight '" << tied.name << "': " << parameter << " is " << kernels::shape_str(found->value.shape())
                                     << " but " << tied.parameters.front() << " is " << kernels::shape_str(first_shape));
    }
  }
}

int stage_of_layer(const Partition& partition, int layer) {
  for (std::size_t s = 0; s < partition.size(); ++s) {
    if (layer >= partition[s].begin && layer < partition[s].end) return static_cast<int>(s);
  }
  PW_FAIL("layer " << layer << " is in no stage of the partition");
}

std::vector<int> tied_stages(const ModelDescription& model, const Partition& partition, const TiedSpec& tied) {
  std::vector<int> stages;
  for (const auto& parameter : tied.parameters) stages.push_back(stage_of_layer(partition, owning_layer(model, parameter)));
  return stages;
}

}  // namespace pw::partition

namespace pw::partition {

int layer_index(const ModelDescription& model, std::string_view name) {
  for (int i = 0; i < model.layer_count(); ++i)
    if (model.layers[static_cast<std::size_t>(i)].name == name) return i;
  std::ostringstream names;
  for (int i = 0; i < model.layer_count() && i < 12; ++i)
    names << (i > 0 ? ", " : "") << model.layers[static_cast<std::size_t>(i)].name;
  if (model.layer_count() > 12) names << ", ... (" << model.layer_count() << " layers)";
  throw InputError("no layer named '" + std::string(name) + "' in " + (model.name.empty() ? "the model" : model.name) +
                   "; its layers are " + names.str());
}

std::vector<int> split_before(const ModelDescription& model, const std::vector<std::string>& first_layers) {
  std::vector<int> points;
  for (const auto& name : first_layers) {
    const int index = layer_index(model, name);
    PW_INPUT_CHECK(index > 0, "split before '" << name << "': it is the first layer of " << model.name
                                                << ", which starts stage 0 already; name the first layer of stages 1..P-1");
    PW_INPUT_CHECK(points.empty() || index > points.back(),
                   "split before '" << name << "': it does not come after '"
                                    << model.layers[static_cast<std::size_t>(points.back())].name << "' in " << model.name
                                    << "; name the stages' first layers in the model's order");
    points.push_back(index);
  }
  return points;
}

ModelDescription describe_zoo_model(const std::string& name, const ZooOptions& options) {
  PW_INPUT_CHECK(name != "dlrm", "describe_zoo_model: dlrm needs click features; train it by JobConfig::model.name");
  models::ModelOptions o;
  o.width = options.width;
  o.sample_shape = options.sample_shape;
  o.num_classes = options.num_classes;
  return describe(models::make_model_spec(name, o));
}

}  // namespace pw::partition
