#pragma once
// `pipewright data pack ROOT OUT` (image folder to tar shards) and `pipewright data inspect PATH`.
#include <string>

#include <CLI/CLI.hpp>

namespace pw::tools {

struct DataOptions {
  std::string root;
  std::string out;
  std::string shard_size = "256MiB";
  std::string inspect_path;
  bool no_verify = false;
};

void add_data_command(CLI::App& app, DataOptions& options);

}  // namespace pw::tools
