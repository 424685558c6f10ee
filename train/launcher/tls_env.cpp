#include "train/launcher/tls_env.h"

#include <filesystem>

#include "rpc/launch_env.h"
#include "rpc/tls.h"
#include "train/job_config.h"

namespace pw::launcher {

std::vector<std::pair<std::string, std::string>> tls_env(const train::TlsConfig& tls) {
  std::vector<std::pair<std::string, std::string>> env;
  if (tls.enabled()) env = {{rpc::kTlsCertEnv, tls.cert}, {rpc::kTlsKeyEnv, tls.key}, {rpc::kTlsCaEnv, tls.ca}};
  if (tls.plain_links) env.emplace_back(rpc::kPlainLinksEnv, "1");
  return env;
}

train::TlsConfig checked_tls(const train::TlsConfig& tls) {
  train::check_tls_fields(tls);
  if (!tls.enabled()) return tls;
  const auto absolute = [](const std::string& path) {
    std::error_code error;
    const auto full = std::filesystem::absolute(path, error);
    return error ? path : full.lexically_normal().string();
  };
  train::TlsConfig out = tls;
  out.cert = absolute(tls.cert);
  out.key = absolute(tls.key);
  out.ca = absolute(tls.ca);
  train::load_job_tls(out);   // refuses bad files before any process starts
  return out;
}

}  // namespace pw::launcher
