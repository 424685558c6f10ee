#pragma once
// A model as the partitioner sees it: a flat list of layer factories (so a rank builds only its own
// stage), optional explicit split points written in code, and weights tied across layers.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/layers/sequential.h"
#include "models/zoo/model_spec.h"
#include "pipewright/model.h"

namespace pw::partition {

// TiedSpec and ModelDescription: pipewright/model.h.

ModelDescription describe(const models::ModelSpec& spec);

struct StageRange {
  int begin = 0;   // [begin, end) layer indices
  int end = 0;
  int size() const { return end - begin; }
  friend bool operator==(const StageRange&, const StageRange&) = default;
};
using Partition = std::vector<StageRange>;

// How split errors name their source: `label` is what was given ("split points"; empty: only the
// points), `model` the model's name.
struct SplitLabels {
  std::string label = "split";
  std::string model = "the model";
};

// The partition whose stages 1..P-1 start at `split_points`. Points must be strictly increasing
// indices in 1..layer_count-1, so no stage is empty; InputError otherwise.
Partition split_at(int layer_count, const std::vector<int>& split_points, const SplitLabels& labels = {});

// The partition a model's own split_points describe (one stage when there are none).
Partition explicit_partition(const ModelDescription& model);

// "3,7,12" -> {3, 7, 12}; InputError on anything that is not comma-separated integers.
std::vector<int> parse_split_points(std::string_view text);
std::string format_split_points(const std::vector<int>& split_points);   // "3,7,12"

// Throws InputError unless 1 <= stages <= layer_count.
void check_stage_count(int layer_count, int stages, const std::string& model_name);

// Checks that `partition` covers layers 0..layer_count-1 in order with non-empty stages.
void check_partition(const Partition& partition, int layer_count);

// The layers of one stage, named as in the whole model (so parameter names match the
// single-device model) and initialised from `seed`: the same weights the whole model draws.
std::unique_ptr<models::Sequential> build_stage(const ModelDescription& model, StageRange range, std::uint64_t seed);

// The index of the layer that owns a dotted parameter name (the longest layer name that prefixes
// it); InputError naming the parameter when no layer does.
int owning_layer(const ModelDescription& model, const std::string& parameter);

// Checks every tied weight: at least two parameters, each owned by a layer that has it, all of
// one shape. InputError naming the tied weight otherwise.
void check_tied(const ModelDescription& model);

// The stage of each parameter of a tied weight, in the order of `tied.parameters`.
std::vector<int> tied_stages(const ModelDescription& model, const Partition& partition, const TiedSpec& tied);

int stage_of_layer(const Partition& partition, int layer);

}  // namespace pw::partition
