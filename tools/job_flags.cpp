#include "tools/job_flags.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/json_text.h"

namespace pw::tools {

std::vector<kernels::Device> parse_device_list(const std::string& text) {
  std::vector<kernels::Device> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(kernels::Device::parse(item));
  return out;
}

train::JobConfig read_job_config(const std::string& path) {
  // Depth-checked before parsing (core/json_text.h); a config is a few KiB, so 16 MiB is plenty.
  const auto j = read_json_file(path, "--config", std::int64_t{16} << 20);
  try {
    return train::job_config_from_json(j);
  } catch (const train::ConfigError& e) {
    throw InputError("--config " + path + ": " + e.what());
  }
}

CLI::Option* add_config_option(CLI::App& cmd, train::JobConfig& job) {
  return cmd
      .add_option_function<std::string>(
          "--config", [&job](const std::string& path) { job = read_job_config(path); },
          "start from this job config (JSON, as --print-config writes it); flags beside it override its fields")
      ->group("Config");
}

}  // namespace pw::tools
