#pragma once
// Embedding tables whose rows live on a job's parameter servers. A model describes them (the
// zoo's DLRM, pw::layers::embedding_bag with TablePlacement::ParameterServers), but the layer that
// reaches the servers is made by the job running the model: while a RemoteTableScope is open on a
// thread, make_server_backed_bag() hands the table to its maker. A model description therefore
// holds no connection, and the same description builds on every rank.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "models/layer.h"

namespace pw::models {

struct EmbeddingTableSpec {
  std::string name;        // the bag layer's dotted name in the model: "features.emb.0"
  std::int64_t rows = 0;
  int dim = 0;
  int bag_size = 1;
  BagMode mode = BagMode::Sum;
  // The bag's ids [N, bag] (I64) from a micro-batch of the model's input, where the model can say
  // (the bag reads the input of the model's first layer): lets a job fetch a step's rows ahead.
  std::function<Tensor(const Tensor& model_input)> ids_from_model_input;
};

using RemoteTableMaker = std::function<std::unique_ptr<Layer>(const EmbeddingTableSpec& table)>;

class RemoteTableScope {
 public:
  explicit RemoteTableScope(RemoteTableMaker maker);
  ~RemoteTableScope();
  RemoteTableScope(const RemoteTableScope&) = delete;
  RemoteTableScope& operator=(const RemoteTableScope&) = delete;

 private:
  RemoteTableMaker maker_;
  const RemoteTableMaker* previous_;
};

// The layer for a server-backed table, from the innermost scope open on this thread. Outside any
// (a model built to count its parameters or shapes), a stand-in with the bag's shapes and no
// parameters, whose forward is an InputError saying the table needs a job with parameter servers.
std::unique_ptr<Layer> make_server_backed_bag(const EmbeddingTableSpec& table);

}  // namespace pw::models
