#include "models/remote_table.h"

#include "core/error.h"

namespace pw::models {
namespace {
thread_local const RemoteTableMaker* current_maker = nullptr;
}

RemoteTableScope::RemoteTableScope(RemoteTableMaker maker) : maker_(std::move(maker)), previous_(current_maker) {
  current_maker = &maker_;
}

RemoteTableScope::~RemoteTableScope() { current_maker = previous_; }

namespace {

// A server-backed table built outside a job: its shapes, none of its rows.
class TableOutsideJob final : public Layer {
 public:
  explicit TableOutsideJob(EmbeddingTableSpec table) : table_(std::move(table)) {}
  std::string type_name() const override { return "EmbeddingBag (on parameter servers)"; }

 protected:
  Output forward_impl(const Tensor&, Mode) override {
    throw InputError("embedding table '" + table_.name + "' keeps its rows on parameter servers, and only a job "
                     "with parameter servers (JobConfig /ps/servers or /ps/addresses) can run it");
  }
  Tensor backward_input_impl(Context&, const Tensor&) override { return {}; }
  Shape output_shape_impl(const Shape& input) const override {
    PW_INPUT_CHECK(input.size() == 2 && input[1] == table_.bag_size,
                   "EmbeddingBag '" << table_.name << "' expects ids [batch, " << table_.bag_size << "], got "
                                    << shape_str(input));
    return {input[0], table_.dim};
  }

 private:
  EmbeddingTableSpec table_;
};

}  // namespace

std::unique_ptr<Layer> make_server_backed_bag(const EmbeddingTableSpec& table) {
  if (current_maker == nullptr) return std::make_unique<TableOutsideJob>(table);
  return (*current_maker)(table);
}

std::vector<std::string> server_tables_of(const std::vector<LayerSpec>& layers) {
  std::vector<std::string> out;
  for (const auto& l : layers) out.insert(out.end(), l.server_tables.begin(), l.server_tables.end());
  return out;
}

}  // namespace pw::models
