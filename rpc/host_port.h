#pragma once
// "host:port" addresses of rank servers; IPv6 hosts in brackets ("[::1]:5000").
#include <string>
#include <string_view>

namespace pw::rpc {

struct HostPort {
  std::string host;
  int port = 0;   // 0 when binding: any free port
  std::string str() const;
};

// Throws InputError naming the text and the accepted form.
HostPort parse_host_port(std::string_view text);

}  // namespace pw::rpc
