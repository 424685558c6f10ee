#include "rpc/host_port.h"

#include <charconv>

#include "core/error.h"

namespace pw::rpc {

std::string HostPort::str() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HostPort parse_host_port(std::string_view text) {
  const auto colon = text.rfind(':');
  PW_INPUT_CHECK(colon != std::string_view::npos && colon > 0,
                 "bad address '" << text << "'; expected host:port (e.g. 127.0.0.1:29500 or [::1]:29500)");
  std::string_view host = text.substr(0, colon);
  const std::string_view digits = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  PW_INPUT_CHECK(!host.empty() && ec == std::errc() && end == digits.data() + digits.size() && port >= 0 &&
                     port <= 65535,
                 "bad address '" << text << "'; expected host:port with a port from 0 to 65535");
  return HostPort{std::string(host), port};
}

}  // namespace pw::rpc
