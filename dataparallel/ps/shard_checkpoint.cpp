// PsShard's part of a job checkpoint: folder/shard-<s>/ holds one file per table (its rows,
// optimizer state and the pushes they hold) and manifest.json, written last, which lists the
// tables with their definitions, sizes and checksums. Restore reads and checks everything before
// it replaces a single table.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/json_text.h"
#include "dataparallel/ps/shard.h"
#include "dataparallel/ps/shard_table.h"
#include "rpc/transport.h"

namespace pw::dp {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kTableMagic = 0x3150434b53505750ULL;   // "PWPSCKP1"
constexpr const char* kFormat = "pipewright parameter-server checkpoint";
constexpr int kVersion = 1;
constexpr const char* kManifest = "manifest.json";

template <typename T>
void put(std::ostream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}

std::string read_whole(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  PW_INPUT_CHECK(in.good(), file.string() << " is missing; the parameter-server checkpoint is incomplete");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// How many shard-<n> subfolders `folder` holds (what a checkpoint of another shard count looks like).
int shard_folders(const fs::path& folder) {
  int n = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec))
    if (entry.is_directory() && entry.path().filename().string().rfind("shard-", 0) == 0) ++n;
  return n;
}

}  // namespace

std::string ps_checkpoint_subfolder(int shard) { return "shard-" + std::to_string(shard); }

std::vector<PsCheckpointFile> PsShard::checkpoint(const std::string& folder, std::int64_t step,
                                                  std::chrono::steady_clock::time_point deadline) {
  PW_INPUT_CHECK(step >= 0, "a checkpoint of step " << step << "; steps count from 0");
  PW_INPUT_CHECK(!folder.empty(), "a parameter-server checkpoint needs a folder");
  std::lock_guard one_at_a_time(checkpoint_mutex_);
  const std::string where = "shard " + std::to_string(config_.shard);
  const std::string sub = ps_checkpoint_subfolder(config_.shard);
  const fs::path dir = fs::path(folder) / sub;
  try {
    make_own_folder(dir.string(), "parameter-server checkpoint folder");
  } catch (const InputError& e) {
    throw InputError(where + ": " + e.what());
  }

  std::vector<PsCheckpointFile> files;
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& held : all_tables()) {
    Table& t = *held;
    const auto& c = t.data.config();
    std::ostringstream state;
    {
      std::unique_lock lock(t.mutex);
      const std::int64_t needed = step - 1;
      // Parts of a push are held outside the rows until the push is whole: they are not written.
      if (!t.applied.wait_until(lock, deadline, [&] { return t.applied_through >= needed; })) {
        std::ostringstream behind;
        for (std::size_t w = 0; w < t.last_pushed.size(); ++w)
          if (t.last_pushed[w] < needed) behind << (behind.tellp() > 0 ? ", " : "") << w << " (at " << t.last_pushed[w] << ")";
        throw rpc::TimeoutError(where + ", table '" + c.name + "': the checkpoint of step " + std::to_string(step) +
                                " waits for every worker's pushes of step " + std::to_string(needed) +
                                "; behind: worker " + behind.str());
      }
      PW_INPUT_CHECK(t.applied_through == needed,
                     where << ", table '" << c.name << "': the checkpoint of step " << step << " comes after step "
                           << t.applied_through << " was applied; take it before any step " << step
                           << " is (do the servers count steps from an earlier run?)");
      // Sync: later steps' pushes wait in `pending` and are not in the rows, so every worker
      // stands at `needed`. Async and bounded applied each push as it came.
      const auto pushed = config_.mode == UpdateMode::Sync
                              ? std::vector<std::int64_t>(t.last_pushed.size(), t.applied_through)
                              : t.last_pushed;
      put(state, kTableMagic);
      write_push_accounting(state, t.applied_through, pushed);
      t.data.write(state);
    }
    const std::string name = c.name + ".table";
    const auto bytes = state.view();
    write_file_durably((dir / name).string(), bytes);
    const auto sum = checksum_hex(checksum64(bytes.data(), bytes.size()));
    files.push_back({sub + "/" + name, static_cast<std::int64_t>(bytes.size()), sum});
    auto spec = table_spec_json(c);
    spec["file"] = name;
    spec["bytes"] = bytes.size();
    spec["checksum"] = sum;
    tables.push_back(std::move(spec));
  }
  const nlohmann::json manifest = {{"format", kFormat}, {"version", kVersion}, {"shard", config_.shard},
                                   {"shards", config_.shards}, {"workers", config_.workers},
                                   {"mode", update_mode_name(config_.mode)}, {"step", step}, {"tables", tables}};
  const std::string text = manifest.dump(2) + "\n";
  write_file_durably((dir / kManifest).string(), text);
  files.push_back({sub + "/" + kManifest, static_cast<std::int64_t>(text.size()),
                   checksum_hex(checksum64(text.data(), text.size()))});
  // The new subfolder's entry (and the folder's, if this call made it).
  sync_directory(folder);
  if (const auto parent = fs::absolute(fs::path(folder)).parent_path(); !parent.empty()) sync_directory(parent.string());
  return files;
}

void PsShard::restore(const std::string& folder, PsRestore how) {
  std::lock_guard one_at_a_time(checkpoint_mutex_);
  const fs::path dir = fs::path(folder) / ps_checkpoint_subfolder(config_.shard);
  const fs::path manifest_file = dir / kManifest;
  if (!fs::exists(manifest_file)) {
    PW_INPUT_CHECK(fs::is_directory(folder), "checkpoint folder " << folder << " does not exist");
    const int found = shard_folders(folder);
    PW_INPUT_CHECK(found == 0 || found == config_.shards,
                   folder << " holds a parameter-server checkpoint of " << found << " shards; this job has "
                          << config_.shards);
    throw InputError(manifest_file.string() + " is missing; " + folder +
                     " holds no whole parameter-server checkpoint for shard " + std::to_string(config_.shard));
  }

  std::map<std::string, std::shared_ptr<Table>> loaded;
  try {
    const std::string text = read_whole(manifest_file);
    check_json_depth(text, manifest_file.string());   // before parsing (core/json_text.h)
    const auto j = nlohmann::json::parse(text);
    PW_INPUT_CHECK(j.at("format").get<std::string>() == kFormat && j.at("version").get<int>() == kVersion,
                   manifest_file.string() << " is not a parameter-server checkpoint manifest (version " << kVersion << ")");
    const int shards = j.at("shards").get<int>();
    PW_INPUT_CHECK(shards == config_.shards, folder << " holds a parameter-server checkpoint of " << shards
                                                    << " shards; this job has " << config_.shards);
    PW_INPUT_CHECK(j.at("shard").get<int>() == config_.shard,
                   manifest_file.string() << " belongs to shard " << j.at("shard").get<int>() << ", not shard "
                                          << config_.shard);
    const auto step = j.at("step").get<std::int64_t>();
    for (const auto& spec : j.at("tables")) {
      const TableConfig c = table_spec_from(spec);
      check_table_config(c);
      if (config_.bounds && !(*config_.bounds == c.bounds))
        throw InputError(manifest_file.string() + ": table '" + c.name + "' was saved with " +
                         describe_bounds(c.bounds) + "; this server was started for " +
                         describe_bounds(*config_.bounds));
      const fs::path file = dir / spec.at("file").get<std::string>();
      const std::string where = file.string();
      const std::string bytes = read_whole(file);
      PW_INPUT_CHECK(static_cast<std::int64_t>(bytes.size()) == spec.at("bytes").get<std::int64_t>(),
                     where << " holds " << bytes.size() << " bytes; the checkpoint wrote " << spec.at("bytes"));
      PW_INPUT_CHECK(checksum_hex(checksum64(bytes.data(), bytes.size())) == spec.at("checksum").get<std::string>(),
                     where << " is damaged: its checksum differs from the one the checkpoint wrote");

      auto t = std::make_shared<Table>(c, config_.workers);
      std::istringstream in(bytes);
      std::uint64_t magic = 0;
      in.read(reinterpret_cast<char*>(&magic), sizeof magic);
      std::vector<std::int64_t> pushed;
      PW_INPUT_CHECK(in.good() && magic == kTableMagic && read_push_accounting(in, t->applied_through, pushed),
                     where << " is not a parameter-server checkpoint table");
      PW_INPUT_CHECK(t->applied_through == step - 1, where << " holds steps through " << t->applied_through
                                                           << "; its manifest says step " << step);
      t->data.read(in, where);
      PW_INPUT_CHECK(in.peek() == EOF, where << " has bytes after its last row");
      // Per-worker positions carry over only where they mean the same: same workers, and not
      // sync (which counts every worker's push of a step, so all must stand at the same one).
      if (pushed.size() == static_cast<std::size_t>(config_.workers) && config_.mode != UpdateMode::Sync)
        t->last_pushed = pushed;
      else
        t->last_pushed.assign(static_cast<std::size_t>(config_.workers), t->applied_through);
      loaded.emplace(c.name, std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(manifest_file.string() + " is not a parameter-server checkpoint manifest: " + e.what());
  }

  if (how == PsRestore::CheckOnly) return;
  std::unique_lock lock(tables_mutex_);
  std::error_code ignored;
  for (auto& [name, old] : tables_) {
    std::lock_guard old_lock(old->mutex);
    old->retired = true;
    old->wal.close();
    if (auto it = loaded.find(name); it != loaded.end())
      it->second->sequence = old->sequence;   // log records of the old table stay behind the new snapshot
    else if (!config_.dir.empty()) {
      fs::remove(path(name, ".snap"), ignored);
      fs::remove(path(name, ".wal"), ignored);
    }
    old->applied.notify_all();
  }
  tables_ = std::move(loaded);
  if (config_.dir.empty()) return;
  for (auto& [name, t] : tables_) {
    std::lock_guard table_lock(t->mutex);
    snapshot(*t);
  }
  write_manifest();
}

}  // namespace pw::dp
