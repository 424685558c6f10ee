#pragma once
// What the multi-process tests compare: summaries and weights files of two runs of one job, and
// a free loopback port for ranks started by hand.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"

namespace pw::test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(std::ifstream(path)); }

// Runs `pipewright COMMAND`, writing NAME.json and NAME.safetensors in `dir`; returns the summary.
inline nlohmann::json run_job(const ScratchDir& dir, const std::string& command, const std::string& name) {
  const auto r = run_pipewright(command + " --summary " + dir.file(name + ".json") + " --save " +
                                dir.file(name + ".safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, command << "\n" << r.output);
  return read_json(dir.file(name + ".json"));
}

// Two summaries' losses agree step by step within `relative`.
inline void check_losses_close(const nlohmann::json& a, const nlohmann::json& b, double relative) {
  const auto& x = a["loss_history"];
  const auto& y = b["loss_history"];
  BOOST_REQUIRE_EQUAL(x.size(), y.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double p = x[i].get<double>(), q = y[i].get<double>();
    BOOST_TEST(std::abs(p - q) <= relative * std::abs(p), "step " << i << ": " << p << " vs " << q);
  }
}

// Runs `a` and `b` (NAME.json summaries and NAME.safetensors weights in `dir`) agree bitwise.
inline void check_same(const ScratchDir& dir, const std::string& a, const std::string& b) {
  const auto x = read_json(dir.file(a + ".json"));
  const auto y = read_json(dir.file(b + ".json"));
  BOOST_TEST(x["loss_history"] == y["loss_history"]);   // bitwise: the doubles print identically
  BOOST_TEST(x["test_loss"] == y["test_loss"]);
  BOOST_TEST(x["test_accuracy"] == y["test_accuracy"]);
  BOOST_TEST(x.value("test_top5_accuracy", -1.0) == y.value("test_top5_accuracy", -1.0));
  BOOST_TEST(read_file(dir.file(a + ".safetensors")) == read_file(dir.file(b + ".safetensors")),
             "the saved weights differ");
}

// Binds `port` on loopback (0: any) and returns the port bound, or 0 when it is taken.
inline int bind_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof addr;
  int bound = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    bound = ntohs(addr.sin_port);
  close(fd);
  return bound;
}

// A free port whose successor is free too: a launcher's master port + 1 is its launchers' rendezvous
// (a test running beside this one took it once).
inline int free_port() {
  for (int attempt = 0;; ++attempt) {
    const int port = bind_loopback(0);
    if (port > 0 && port < 65535 && (bind_loopback(port + 1) == port + 1 || attempt == 50)) return port;
  }
}

}  // namespace pw::test
