// DLRM (Naumov et al. 2019) over packed click rows: bottom MLP on the dense features, one
// embedding bag per sparse feature, pairwise dot-product interaction, top MLP to one logit.
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

}  // namespace

ModelSpec make_dlrm_spec(const ModelOptions& o) {
  data::check_click_features(o.clicks);
  PW_INPUT_CHECK(o.clicks.dense >= 1, "dlrm needs at least one dense feature, got " << o.clicks.dense);
  PW_INPUT_CHECK(o.embedding_dim >= 1, "dlrm embedding dim " << o.embedding_dim << "; expected >= 1");
  for (int w : o.bottom_mlp) PW_INPUT_CHECK(w >= 1, "dlrm bottom MLP width " << w << "; expected >= 1");
  for (int w : o.top_mlp) PW_INPUT_CHECK(w >= 1, "dlrm top MLP width " << w << "; expected >= 1");

  ModelSpec m{"dlrm", {o.clicks.width()}, 2, {}};
  m.objective = Objective::BinaryCrossEntropy;
  const data::ClickFeatures clicks = o.clicks;
  const int dim = o.embedding_dim;
  const auto bottom_widths = o.bottom_mlp;
  const bool on_servers = o.embedding_tables == TablePlacement::ParameterServers;
  for (int f = 0; f < clicks.sparse(); ++f) {
    EmbeddingTableSpec table;
    table.name = "features.emb." + std::to_string(f);
    table.rows = clicks.table_sizes[static_cast<std::size_t>(f)];
    table.dim = dim;
    table.bag_size = clicks.bag_size;
    table.mode = BagMode::Sum;
    // "features" is the model's first layer: its input is the model's.
    table.ids_from_model_input = [clicks, f](const Tensor& x) {
      return unpack_bag_ids(x.to(Device::cpu()).to(kernels::DType::F32), clicks, f);
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
  if (on_servers)
    for (const auto& t : m.embedding_tables) m.layers.back().server_tables.push_back(t.name);
  const int vectors = 1 + clicks.sparse();
  m.layers.push_back({"interaction", [=] { return std::unique_ptr<Layer>(std::make_unique<DotInteraction>(vectors, dim)); }});
  int in = dim + vectors * (vectors - 1) / 2;
  int index = 0;
  for (int width : o.top_mlp) {
    m.layers.push_back({"top." + std::to_string(index++), [=] { return std::unique_ptr<Layer>(std::make_unique<Linear>(in, width)); }});
    m.layers.push_back({"top." + std::to_string(index++), [] { return std::unique_ptr<Layer>(std::make_unique<ReLU>()); }});
    in = width;
  }
  m.layers.push_back({"top." + std::to_string(index), [=] { return std::unique_ptr<Layer>(std::make_unique<Linear>(in, 1)); }});
  return m;
}

}  // namespace pw::models
