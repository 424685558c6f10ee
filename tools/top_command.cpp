#include "tools/top_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <thread>

#include "core/error.h"
#include "rpc/host_port.h"
#include "rpc/job_token.h"
#include "rpc/tls.h"
#include "tools/flag_checks.h"
#include "tools/top_view.h"
#include "train/monitor/metrics_server.h"

namespace pw::tools {
namespace {

struct TopOptions {
  std::string address;
  double interval = 1.0;
  bool once = false;
  std::string tls_ca;   // set: the endpoint serves HTTPS with a certificate this CA signed
};

int run_top(const TopOptions& o) {
  rpc::HostPort where;
  try {
    where = rpc::parse_host_port(o.address);
  } catch (const InputError& e) {
    throw InputError(std::string("top: ") + e.what());
  }
  const int timeout_ms = std::max(1000, static_cast<int>(o.interval * 1000));
  const bool redraw = !o.once && isatty(STDOUT_FILENO);
  // An endpoint off loopback asks for the job's token (train --metrics-port).
  const char* env_token = std::getenv(rpc::kJobTokenEnv);
  const std::string token = env_token != nullptr ? env_token : "";
  // A job with --tls-* serves HTTPS (train/monitor/metrics_server.h); as train, the flag or PW_TLS_CA.
  const char* env_ca = std::getenv(rpc::kTlsCaEnv);
  const std::string ca = !o.tls_ca.empty() ? o.tls_ca : env_ca != nullptr ? env_ca : "";
  std::vector<MetricSample> before;
  auto then = std::chrono::steady_clock::now();
  for (bool first = true;; first = false) {
    const auto now_time = std::chrono::steady_clock::now();
    std::vector<MetricSample> now;
    try {
      now = parse_exposition(monitor::http_get(where.host, where.port, "/metrics", timeout_ms, token, ca));
    } catch (const InputError&) {
      throw;
    } catch (const Error& e) {
      const std::string what = e.what();
      const std::string hint = what.find("answered 401") != std::string::npos
                                   ? " (the endpoint asks for the job's token: set PW_JOB_TOKEN)"
                               : ca.empty() && what.find("end of stream") != std::string::npos
                                   ? " (a job with --tls-* serves HTTPS: give top --tls-ca with the job's CA)"
                                   : " (is a job running with --metrics-port?)";
      if (first || o.once) throw InputError("top: " + what + hint);
      std::printf("\n%s (the job has ended or its endpoint is gone)\n", e.what());
      return 0;
    }
    TopFrame frame{o.address, now, first ? nullptr : &before,
                   std::chrono::duration<double>(now_time - then).count()};
    if (redraw) std::printf("\033[H\033[2J");
    std::printf("%s", render_top(frame).c_str());
    std::fflush(stdout);
    if (o.once) return 0;
    before = std::move(now);
    then = now_time;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval));
    if (!redraw) std::printf("\n");
  }
}

}  // namespace

void add_top_command(CLI::App& app) {
  auto options = std::make_shared<TopOptions>();
  auto* cmd = app.add_subcommand("top", "watch a running job's metrics endpoint (train --metrics-port) as a live table");
  cmd->add_option("address", options->address, "HOST:PORT of the job's metrics endpoint")->required();
  cmd->add_option("--interval", options->interval, "seconds between scrapes")
      ->capture_default_str()->check(range(0.1, 3600.0));
  cmd->add_flag("--once", options->once, "print one table and exit");
  cmd->add_option("--tls-ca", options->tls_ca,
                  "the job's CA certificate (PEM): for a job with --tls-*, whose endpoint serves HTTPS "
                  "(default: PW_TLS_CA)")
      ->check(CLI::ExistingFile);
  cmd->callback([options] { std::exit(run_top(*options)); });
}

}  // namespace pw::tools
