// DLRM (Naumov et al. 2019) over packed click rows: bottom MLP on the dense features, one
// embedding bag per sparse feature, pairwise dot-product interaction, top MLP to one logit.
#include <memory>
#include <string>

#include "models/layers/dlrm_features.h"
#include "models/layers/dot_interaction.h"
#include "models/layers/embedding_bag.h"
#include "models/layers/linear.h"
#include "models/layers/simple.h"
#include "models/zoo/model_spec.h"

namespace pw::models {
namespace {

std::unique_ptr<Sequential> mlp(int in, const std::vector<int>& hidden, int out) {
  auto seq = std::make_unique<Sequential>();
  int index = 0;
  for (int width : hidden) {
    seq->add(std::to_string(index++), std::make_unique<Linear>(in, width));
    seq->add(std::to_string(index++), std::make_unique<ReLU>());
    in = width;
  }
  seq->add(std::to_string(index), std::make_unique<Linear>(in, out));
  return seq;
}

// What mlp() builds, counted.
std::int64_t mlp_parameters(std::int64_t in, const std::vector<int>& hidden, std::int64_t out) {
  std::int64_t n = 0;
  for (int width : hidden) {
    n = saturating_add(n, linear_parameters(in, width, Bias::Yes));
    in = width;
  }
  return saturating_add(n, linear_parameters(in, out, Bias::Yes));
}

}  // namespace

std::int64_t dlrm_interaction_width(std::int64_t vectors, std::int64_t dim) {
  // vectors(vectors-1)/2 without overflow: halve the even factor first.
  const std::int64_t pairs = vectors % 2 == 0 ? saturating_mul(vectors / 2, vectors - 1)
                                              : saturating_mul(vectors, (vectors - 1) / 2);
  return saturating_add(dim, pairs);
}

ModelSpec make_dlrm_spec(const ModelOptions& o) {
  data::check_click_features(o.clicks);
  PW_INPUT_CHECK(o.clicks.dense >= 1, "dlrm needs at least one dense feature, got " << o.clicks.dense);
  PW_INPUT_CHECK(o.embedding_dim >= 1, "dlrm embedding dim " << o.embedding_dim << "; expected >= 1");
  for (int w : o.bottom_mlp) PW_INPUT_CHECK(w >= 1, "dlrm bottom MLP width " << w << "; expected >= 1");
  for (int w : o.top_mlp) PW_INPUT_CHECK(w >= 1, "dlrm top MLP width " << w << "; expected >= 1");
  PW_INPUT_CHECK(o.clicks.sparse() <= kMaxDlrmTables,
                 "dlrm: " << o.clicks.sparse() << " tables; at most " << kMaxDlrmTables << " (its interaction is "
                          << dlrm_interaction_width(1 + o.clicks.sparse(), o.embedding_dim)
                          << " values wide, one per pair of tables, more than a layer's width can be)");

  ModelSpec m{"dlrm", {o.clicks.width()}, 2, {}};
  m.objective = Objective::BinaryCrossEntropy;
  const data::ClickFeatures clicks = o.clicks;
  const int dim = o.embedding_dim;
  const auto bottom_widths = o.bottom_mlp;
  const bool on_servers = o.embedding_tables == TablePlacement::ParameterServers;
  const auto shared_clicks = std::make_shared<const data::ClickFeatures>(clicks);
  for (int f = 0; f < clicks.sparse(); ++f) {
    EmbeddingTableSpec table;
    table.name = "features.emb." + std::to_string(f);
    table.rows = clicks.table_sizes[static_cast<std::size_t>(f)];
    table.dim = dim;
    table.bag_size = clicks.bag_size;
    table.mode = BagMode::Sum;
    // "features" is the model's first layer: its input is the model's. The tables share one copy
    // of the features (a copy each would grow with the square of the table count).
    table.ids_from_model_input = [shared_clicks, f](const Tensor& x) {
      return unpack_bag_ids(x.to(Device::cpu()).to(kernels::DType::F32), *shared_clicks, f);
    };
    m.embedding_tables.push_back(std::move(table));
  }
  m.layers.push_back({"features", [=, tables = m.embedding_tables] {
                        std::vector<std::unique_ptr<Layer>> bags;
                        for (const auto& t : tables)
                          bags.push_back(on_servers ? make_server_backed_bag(t)
                                                    : std::make_unique<EmbeddingBag>(t.rows, t.dim, t.bag_size, t.mode));
                        return std::unique_ptr<Layer>(std::make_unique<DlrmFeatures>(
                            clicks, dim, mlp(clicks.dense, bottom_widths, dim), std::move(bags)));
                      }});
  // The bottom MLP, and the tables unless they live on the servers.
  m.layers.back().parameters = mlp_parameters(clicks.dense, bottom_widths, dim);
  if (!on_servers)
    for (const auto& t : m.embedding_tables)
      m.layers.back().parameters = saturating_add(m.layers.back().parameters, saturating_mul(t.rows, t.dim));
  if (on_servers)
    for (const auto& t : m.embedding_tables) m.layers.back().server_tables.push_back(t.name);
  const int vectors = 1 + clicks.sparse();
  m.layers.push_back({"interaction", [=] { return std::unique_ptr<Layer>(std::make_unique<DotInteraction>(vectors, dim)); }});
  m.layers.back().parameters = 0;
  // At most kMaxDlrmTables tables keep this within an int (the layers' widths).
  int in = static_cast<int>(dlrm_interaction_width(vectors, dim));
  int index = 0;
  const auto add = [&](LayerSpec layer, std::int64_t parameters) {
    layer.parameters = parameters;
    m.layers.push_back(std::move(layer));
  };
  for (int width : o.top_mlp) {
    add({"top." + std::to_string(index++), [=] { return std::unique_ptr<Layer>(std::make_unique<Linear>(in, width)); }},
        linear_parameters(in, width, Bias::Yes));
    add({"top." + std::to_string(index++), [] { return std::unique_ptr<Layer>(std::make_unique<ReLU>()); }}, 0);
    in = width;
  }
  add({"top." + std::to_string(index), [=] { return std::unique_ptr<Layer>(std::make_unique<Linear>(in, 1)); }},
      linear_parameters(in, 1, Bias::Yes));
  return m;
}

}  // namespace pw::models
