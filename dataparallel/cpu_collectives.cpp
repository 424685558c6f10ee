#include "dataparallel/cpu_collectives.h"

#include <algorithm>

#include "rpc/launch_env.h"

namespace pw::dp {

bool links_leave_host(const GroupSite& site) {
  return std::any_of(site.member_hosts.begin(), site.member_hosts.end(),
                     [](const std::string& host) { return !rpc::is_loopback_host(host); });
}

CpuCollectives resolve_cpu_collectives(CpuCollectives choice, const GroupSite& site) {
  if (choice != CpuCollectives::Auto) return choice;
  return links_leave_host(site) ? CpuCollectives::Links : CpuCollectives::Gloo;
}

}  // namespace pw::dp
