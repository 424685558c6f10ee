#include "rpc/launch_env.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "rpc/job_token.h"

namespace pw::rpc {

namespace {

struct Names {
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
  const char* launcher;
};

constexpr Names kLaunchers[] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun-style"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
     "Open MPI"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "Slurm"},
};

std::optional<int> read_int(const EnvLookup& lookup, const char* name, int min_value) {
  const char* text = lookup(name);
  if (text == nullptr) return std::nullopt;
  const std::string_view s(text);
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  PW_INPUT_CHECK(!s.empty() && ec == std::errc() && end == s.data() + s.size() && value >= min_value,
                 name << "='" << s << "' is not an integer >= " << min_value);
  return value;
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string local_address_towards(const std::string& master_host) {
  if (const char* forced = std::getenv("PW_ADVERTISE_ADDR"); forced != nullptr && *forced != '\0') return forced;
  if (is_loopback_host(master_host)) return master_host == "::1" ? "::1" : "127.0.0.1";
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(master_host.c_str(), "9", &hints, &found);
  PW_INPUT_CHECK(rc == 0 && found != nullptr,
                 "cannot resolve the rendezvous host '" << master_host << "': " << gai_strerror(rc));
  std::string address;
  // Connecting a UDP socket sends nothing; it only asks the kernel which local address routes there.
  const int fd = socket(found->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char text[INET6_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      const void* raw = local.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, raw, text, sizeof text) != nullptr) address = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  PW_INPUT_CHECK(!address.empty(), "no local address routes to the rendezvous host '"
                                       << master_host << "'; set PW_ADVERTISE_ADDR to this host's address");
  return address;
}

bool is_this_host(const std::string& host) {
  if (is_loopback_host(host)) return true;
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return false;
  bool local = false;
  for (const addrinfo* a = found; a != nullptr && !local; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage source{};
    socklen_t len = sizeof source;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&source), &len) == 0) {
      if (source.ss_family == AF_INET && a->ai_family == AF_INET)
        local = reinterpret_cast<sockaddr_in*>(&source)->sin_addr.s_addr ==
                reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr;
      else if (source.ss_family == AF_INET6 && a->ai_family == AF_INET6)
        local = std::memcmp(&reinterpret_cast<sockaddr_in6*>(&source)->sin6_addr,
                            &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr, sizeof(in6_addr)) == 0;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return local;
}

std::optional<LaunchEnv> launch_env_from(const EnvLookup& lookup) {
  for (const Names& names : kLaunchers) {
    const auto world = read_int(lookup, names.world, 1);
    const auto rank = read_int(lookup, names.rank, 0);
    if (!world && !rank) continue;
    // salloc shells and batch scripts carry SLURM_PROCID/SLURM_NTASKS too; only a job step that
    // srun started (SLURM_STEP_ID set) is a rank.
    if (std::string_view(names.launcher) == "Slurm" && lookup("SLURM_STEP_ID") == nullptr) continue;
    PW_INPUT_CHECK(world && rank, names.launcher << " environment: " << (world ? names.rank : names.world)
                                                 << " is missing (" << (world ? names.world : names.rank)
                                                 << " is set); set both");
    if (*world == 1) return std::nullopt;
    PW_INPUT_CHECK(*rank < *world, names.rank << "=" << *rank << " is outside " << names.world << "=" << *world);
    LaunchEnv env;
    env.launcher = names.launcher;
    env.rank = *rank;
    env.world_size = *world;
    env.local_rank = read_int(lookup, names.local_rank, 0).value_or(0);
    // Slurm's SLURM_NTASKS_PER_NODE may be a list like "2(x3)"; only a plain number is used.
    try {
      env.local_world_size = read_int(lookup, names.local_world, 1).value_or(1);
    } catch (const InputError&) {
      env.local_world_size = 1;
    }
    const char* addr = lookup("MASTER_ADDR");
    PW_INPUT_CHECK(addr != nullptr && *addr != '\0',
                   names.launcher << " environment with " << names.world << "=" << *world
                                  << " but no MASTER_ADDR; set MASTER_ADDR (and MASTER_PORT, default "
                                  << kDefaultMasterPort << ") to rank 0's host");
    env.master.host = addr;
    env.master.port = read_int(lookup, "MASTER_PORT", 1).value_or(kDefaultMasterPort);
    PW_INPUT_CHECK(env.master.port <= 65535, "MASTER_PORT=" << env.master.port << " is not a port (1 to 65535)");
    // Under torchrun its agent's store already listens on MASTER_PORT: ours takes the next port.
    if (lookup("TORCHELASTIC_RUN_ID") != nullptr) {
      env.launcher = "torchrun";
      PW_INPUT_CHECK(env.master.port < 65535, "MASTER_PORT=" << env.master.port << " leaves no next port for the rendezvous");
      env.master.port += 1;
    }
    const char* token = lookup(kJobTokenEnv);
    PW_INPUT_CHECK(token != nullptr, "a " << *world << "-rank job needs the job token in " << kJobTokenEnv
                                          << " on every rank (pipewright launch sets it; with srun or mpirun export "
                                          << kJobTokenEnv << "=$(openssl rand -hex 16) first)");
    env.job_token = token;
    check_job_token(env.job_token, kJobTokenEnv);
    const char* advertise = lookup("PW_ADVERTISE_ADDR");
    env.advertise_host = advertise != nullptr && *advertise != '\0' ? advertise : "";
    env.restarts = restart_env_from(lookup);
    const char* plain = lookup(kPlainLinksEnv);
    env.plain_links = plain != nullptr && std::string_view(plain) == "1";
    return env;
  }
  return std::nullopt;
}

std::string restart_causes_json(const std::vector<std::string>& causes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "[";
  for (std::size_t i = 0; i < causes.size(); ++i) {
    if (i > 0) out += ", ";
    out += '"';
    for (const char c : causes[i]) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else if (u < 0x20 || u == 0x7F) {
        out += "\\u00";
        out += kHex[u >> 4];
        out += kHex[u & 0xF];
      } else {
        out += c;
      }
    }
    out += '"';
  }
  return out + "]";
}

std::vector<std::string> parse_restart_causes(std::string_view json) {
  std::size_t at = 0;
  const auto fail = [&](const std::string& what) {
    throw InputError(std::string(kRestartCausesEnv) + ": " + what + " at character " + std::to_string(at) +
                     "; expected a JSON array of strings like [\"attempt 0: rank 1 ...\"]");
  };
  const auto skip_space = [&] {
    while (at < json.size() && (json[at] == ' ' || json[at] == '\t' || json[at] == '\n' || json[at] == '\r')) ++at;
  };
  const auto hex4 = [&]() -> unsigned {
    if (at + 4 > json.size()) fail("a short \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k, ++at) {
      const char h = json[at];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<unsigned>(h - 'A' + 10);
      else fail("a bad \\u escape");
    }
    return v;
  };
  const auto put_utf8 = [](std::string& s, unsigned cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  };
  std::vector<std::string> causes;
  skip_space();
  if (at >= json.size() || json[at] != '[') fail("no '['");
  ++at;
  skip_space();
  if (at < json.size() && json[at] == ']') {
    ++at;
  } else {
    for (;;) {
      skip_space();
      if (at >= json.size() || json[at] != '"') fail("no string");
      ++at;
      std::string s;
      for (;;) {
        if (at >= json.size()) fail("an unterminated string");
        const char c = json[at++];
        if (c == '"') break;
        if (c != '\\') {
          s += c;
          continue;
        }
        if (at >= json.size()) fail("an unterminated escape");
        switch (const char e = json[at++]) {
          case '"': case '\\': case '/': s += e; break;
          case 'b': s += '\b'; break;
          case 'f': s += '\f'; break;
          case 'n': s += '\n'; break;
          case 'r': s += '\r'; break;
          case 't': s += '\t'; break;
          case 'u': {
            unsigned cp = hex4();
            if (cp >= 0xD800 && cp < 0xDC00 && at + 1 < json.size() && json[at] == '\\' && json[at + 1] == 'u') {
              at += 2;
              const unsigned low = hex4();
              if (low < 0xDC00 || low > 0xDFFF) fail("a lone surrogate");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            put_utf8(s, cp);
            break;
          }
          default: fail(std::string("an unknown escape \\") + e);
        }
      }
      causes.push_back(std::move(s));
      skip_space();
      if (at < json.size() && json[at] == ',') {
        ++at;
        continue;
      }
      if (at < json.size() && json[at] == ']') {
        ++at;
        break;
      }
      fail("no ',' or ']'");
    }
  }
  skip_space();
  if (at != json.size()) fail("text after the array");
  return causes;
}

RestartEnv restart_env_from(const EnvLookup& lookup) {
  RestartEnv env;
  env.count = read_int(lookup, kRestartCountEnv, 0).value_or(0);
  env.max_restarts = read_int(lookup, kMaxRestartsEnv, 0).value_or(0);
  if (const char* causes = lookup(kRestartCausesEnv); causes != nullptr && *causes != '\0')
    env.causes = parse_restart_causes(causes);
  return env;
}

RestartEnv restart_env() {
  return restart_env_from([](const char* name) { return std::getenv(name); });
}

std::optional<LaunchEnv> launch_env() {
  auto env = launch_env_from([](const char* name) { return std::getenv(name); });
  if (env && env->advertise_host.empty()) env->advertise_host = local_address_towards(env->master.host);
  return env;
}

}  // namespace pw::rpc
