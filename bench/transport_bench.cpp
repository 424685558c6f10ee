// Tensor transfer benchmark (print, never assert), one JSON line per size:
//  Thrift: two ThriftTransport endpoints on 127.0.0.1 in this process; a sender thread sends N F32
//          tensors with distinct tags to the other endpoint, whose receiver thread receives them.
//  socket: the same bytes over a plain TCP connection on loopback (length prefix + payload, write
//          loops on one side, read loops into a preallocated buffer on the other).
// Bandwidth: bytes moved over N one-way transfers after a warm-up, divided by the wall time from
// the first send to the last receive. Latency: the median ping-pong round trip of one message of
// that size (the peer echoes it back), halved. Target (issue 4): thrift/socket >= 0.8 at >= 1 MiB.
//  Thrift+TLS: the Thrift run again with both endpoints under mutual TLS (rpc/tls.h), in the same
//          run; tls_bandwidth_ratio and tls_latency_ratio are its figures over plain Thrift's. The
//          certificates are --tls-cert/--tls-key/--tls-ca, or a throw-away CA the `openssl`
//          command makes in a temporary folder.
//   build/bin/transport_bench [--sizes 4096,65536,...] [--scale F] [--tls-cert F --tls-key F --tls-ca F]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/stats.h"
#include "core/clock.h"
#include "bench/raw_socket.h"
#include "rpc/job_token.h"
#include "rpc/thrift_transport.h"
#include "rpc/tls.h"

using namespace pw;
using namespace pw::bench;
namespace {

struct Figures {
  double bytes_per_s = 0.0;
  double latency_s = 0.0;   // one way: half the median round trip
};

// Transfers per size: about `volume` bytes for bandwidth, `rt_volume` for ping-pong, within bounds.
int count_for(std::size_t size, double volume, int lo, int hi) {
  return std::clamp(static_cast<int>(volume / static_cast<double>(size)), lo, hi);
}

// ---- Thrift ------------------------------------------------------------------------------------

Figures bench_thrift(std::size_t size, int n, int warmup, int round_trips, const rpc::Tls& tls = {}) {
  const std::string token = rpc::make_job_token();
  const std::vector<std::string> any_port(2, "127.0.0.1:0");
  rpc::ThriftTransport a(0, 2, any_port, token, rpc::ThriftTransportLimits{}, tls);
  rpc::ThriftTransport b(1, 2, any_port, token, rpc::ThriftTransportLimits{}, tls);
  for (auto* t : {&a, &b}) {
    t->set_peer_address(0, a.address());
    t->set_peer_address(1, b.address());
  }
  const auto deadline = [] { return Clock::now() + std::chrono::seconds(120); };
  const kernels::Tensor payload = kernels::Tensor::zeros({static_cast<std::int64_t>(size / sizeof(float))});
  std::int64_t step = 0;

  // One-way stream: sender thread -> receiver thread, distinct tags.
  const auto stream = [&](int count) {
    const std::int64_t first = step;
    step += count;
    Clock::time_point t0;
    std::thread receiver([&] {
      for (int i = 0; i < count; ++i) {
        kernels::Tensor got = b.recv(0, rpc::Tag{first + i, 0, rpc::PayloadKind::Activation, 1}, deadline());
        (void)got;
      }
    });
    t0 = Clock::now();
    std::thread sender([&] {
      for (int i = 0; i < count; ++i)
        a.send(1, rpc::Tag{first + i, 0, rpc::PayloadKind::Activation, 1}, payload, deadline());
    });
    sender.join();
    receiver.join();
    return seconds_since(t0);
  };
  stream(warmup);
  Figures f;
  f.bytes_per_s = static_cast<double>(size) * n / stream(n);

  // Ping-pong: b echoes every tensor back to a.
  const std::int64_t first = step;
  std::thread echo([&] {
    for (int i = 0; i < round_trips + 1; ++i) {
      kernels::Tensor got = b.recv(0, rpc::Tag{first + i, 0, rpc::PayloadKind::Activation, 1}, deadline());
      b.send(0, rpc::Tag{first + i, 0, rpc::PayloadKind::Gradient, 0}, got, deadline());
    }
  });
  std::vector<double> rtts;
  for (int i = 0; i < round_trips + 1; ++i) {
    const auto t0 = Clock::now();
    a.send(1, rpc::Tag{first + i, 0, rpc::PayloadKind::Activation, 1}, payload, deadline());
    kernels::Tensor back = a.recv(1, rpc::Tag{first + i, 0, rpc::PayloadKind::Gradient, 0}, deadline());
    if (i > 0) rtts.push_back(seconds_since(t0));   // the first one is a warm-up
  }
  echo.join();
  f.latency_s = median(rtts) / 2;
  return f;
}

Figures bench_socket(std::size_t size, int n, int warmup, int round_trips) {
  SocketPair pair;
  std::vector<char> out(size, 0);
  std::vector<char> in(size);
  const auto stream = [&](int count) {
    std::thread receiver([&] {
      for (int i = 0; i < count; ++i) recv_message(pair.server, in);
    });
    const auto t0 = Clock::now();
    std::thread sender([&] {
      for (int i = 0; i < count; ++i) send_message(pair.client, out);
    });
    sender.join();
    receiver.join();
    return seconds_since(t0);
  };
  stream(warmup);
  Figures f;
  f.bytes_per_s = static_cast<double>(size) * n / stream(n);

  std::thread echo([&] {
    std::vector<char> buf(size);
    for (int i = 0; i < round_trips + 1; ++i) {
      recv_message(pair.server, buf);
      send_message(pair.server, buf);
    }
  });
  std::vector<double> rtts;
  for (int i = 0; i < round_trips + 1; ++i) {
    const auto t0 = Clock::now();
    send_message(pair.client, out);
    recv_message(pair.client, in);
    if (i > 0) rtts.push_back(seconds_since(t0));
  }
  echo.join();
  f.latency_s = median(rtts) / 2;
  return f;
}

// A CA and a host certificate it signed (EC P-256), made by the openssl command in `dir`.
rpc::TlsFiles throwaway_pki(const std::filesystem::path& dir) {
  const auto run = [&](const std::string& command) {
    const std::string line = "cd '" + dir.string() + "' && " + command + " >/dev/null 2>&1";
    if (std::system(line.c_str()) != 0) throw std::runtime_error("transport_bench: failed: " + command);
  };
  run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench-ca "
      "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign -keyout ca.key -out ca.pem");
  run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=bench-host -keyout host.key -out host.csr");
  run("openssl x509 -req -days 1 -in host.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out host.pem");
  return {(dir / "host.pem").string(), (dir / "host.key").string(), (dir / "ca.pem").string()};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Thrift tensor transfer against a plain TCP socket on loopback"};
  std::vector<std::size_t> sizes = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 64u << 20};
  double scale = 1.0;
  app.add_option("--sizes", sizes, "message sizes in bytes (multiples of 4)")->delimiter(',');
  app.add_option("--scale", scale, "multiplies the number of transfers per size")->check(CLI::PositiveNumber);
  rpc::TlsFiles files;
  app.add_option("--tls-cert", files.cert, "this host's certificate (default: a throw-away CA's)");
  app.add_option("--tls-key", files.key, "its private key");
  app.add_option("--tls-ca", files.ca, "the CA");
  CLI11_PARSE(app, argc, argv);
  std::string pki_dir;
  if (files.empty()) {
    pki_dir = (std::filesystem::temp_directory_path() / "pw-transport-bench-XXXXXX").string();
    if (mkdtemp(pki_dir.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    files = throwaway_pki(pki_dir);
  }
  const rpc::Tls tls = rpc::load_tls(files);
  if (!pki_dir.empty()) std::filesystem::remove_all(pki_dir);   // loaded: the files are no longer needed

  for (const std::size_t size : sizes) {
    if (size == 0 || size % sizeof(float) != 0) {
      std::fprintf(stderr, "skipping size %zu: not a positive multiple of 4\n", size);
      continue;
    }
    const int n = std::max(1, static_cast<int>(count_for(size, 384.0 * (1 << 20), 6, 4000) * scale));
    const int warmup = std::max(1, n / 5);
    const int round_trips = std::max(3, static_cast<int>(count_for(size, 96.0 * (1 << 20), 5, 1000) * scale));
    const Figures thrift = bench_thrift(size, n, warmup, round_trips);
    const Figures thrift_tls = bench_thrift(size, n, warmup, round_trips, tls);
    const Figures sock = bench_socket(size, n, warmup, round_trips);
    nlohmann::json line = {
        {"bench", "transport"},
        {"size_bytes", size},
        {"transfers", n},
        {"round_trips", round_trips},
        {"thrift_MBps", thrift.bytes_per_s / 1e6},
        {"socket_MBps", sock.bytes_per_s / 1e6},
        {"bandwidth_ratio", thrift.bytes_per_s / sock.bytes_per_s},
        {"thrift_latency_us", thrift.latency_s * 1e6},
        {"socket_latency_us", sock.latency_s * 1e6},
        {"latency_ratio", thrift.latency_s / sock.latency_s},
        {"thrift_tls_MBps", thrift_tls.bytes_per_s / 1e6},
        {"thrift_tls_latency_us", thrift_tls.latency_s * 1e6},
        {"tls_bandwidth_ratio", thrift_tls.bytes_per_s / thrift.bytes_per_s},
        {"tls_latency_ratio", thrift_tls.latency_s / thrift.latency_s},
    };
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
