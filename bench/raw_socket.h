#pragma once
// The peer of the transfer benchmarks: a plain length-prefixed TCP stream over loopback, moving
// the same bytes with nothing on top (no framing library, no checks, no copies beyond recv).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace pw::bench {

inline void check_sys(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

inline void write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    check_sys(w > 0, "send");
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

inline void read_all(int fd, void* data, std::size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    check_sys(r > 0, "recv");
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}

inline void send_message(int fd, const std::vector<char>& buf) {
  const std::uint64_t len = buf.size();
  write_all(fd, &len, sizeof len);
  write_all(fd, buf.data(), buf.size());
}

inline void recv_message(int fd, std::vector<char>& buf) {
  std::uint64_t len = 0;
  read_all(fd, &len, sizeof len);
  if (len != buf.size()) throw std::runtime_error("unexpected message length " + std::to_string(len));
  read_all(fd, buf.data(), len);
}

// A connected pair of TCP sockets on 127.0.0.1, both with TCP_NODELAY.
struct SocketPair {
  int client = -1;
  int server = -1;
  SocketPair() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    check_sys(listener >= 0, "socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    check_sys(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "bind");
    check_sys(::listen(listener, 1) == 0, "listen");
    socklen_t len = sizeof addr;
    check_sys(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0, "getsockname");
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    check_sys(client >= 0, "socket");
    check_sys(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "connect");
    server = ::accept(listener, nullptr, nullptr);
    check_sys(server >= 0, "accept");
    ::close(listener);
    const int one = 1;
    for (int fd : {client, server}) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~SocketPair() {
    ::close(client);
    ::close(server);
  }
};

}  // namespace pw::bench
