#pragma once
// Two network namespaces joined by a veth pair, for tests of jobs spread over two "hosts": each
// has loopback up and one address, 10.213.<subnet>.1 and .2. Needs root and iproute2; made()
// says whether it worked (a test skips visibly otherwise). Deleted when the object goes.
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace pw::test {

class TwoHostNamespaces {
 public:
  // `prefix`: two or three letters that make the names unique to the test (with the pid).
  TwoHostNamespaces(const std::string& prefix, int subnet)
      : a_(prefix + "a" + std::to_string(getpid())), b_(prefix + "b" + std::to_string(getpid())),
        subnet_("10.213." + std::to_string(subnet) + ".") {
    made_ = geteuid() == 0 && shell("ip netns add " + a_) && shell("ip netns add " + b_) &&
            shell("ip link add " + a_ + "v type veth peer name " + b_ + "v") &&
            shell("ip link set " + a_ + "v netns " + a_) && shell("ip link set " + b_ + "v netns " + b_) &&
            shell("ip -n " + a_ + " addr add " + address_a() + "/24 dev " + a_ + "v") &&
            shell("ip -n " + b_ + " addr add " + address_b() + "/24 dev " + b_ + "v") &&
            shell("ip -n " + a_ + " link set " + a_ + "v up") && shell("ip -n " + b_ + " link set " + b_ + "v up") &&
            shell("ip -n " + a_ + " link set lo up") && shell("ip -n " + b_ + " link set lo up");
  }
  ~TwoHostNamespaces() {
    shell("ip netns del " + a_);
    shell("ip netns del " + b_);
  }
  TwoHostNamespaces(const TwoHostNamespaces&) = delete;
  TwoHostNamespaces& operator=(const TwoHostNamespaces&) = delete;

  bool made() const { return made_; }
  const std::string& a() const { return a_; }   // the namespaces' names, for `ip netns exec`
  const std::string& b() const { return b_; }
  std::string address_a() const { return subnet_ + "1"; }
  std::string address_b() const { return subnet_ + "2"; }

 private:
  static bool shell(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }
  std::string a_, b_, subnet_;
  bool made_ = false;
};

}  // namespace pw::test
