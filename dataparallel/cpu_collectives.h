#pragma once
// Which collective a group of replicas uses for CPU tensors (and GPU tensors staged through the
// host): Gloo, whose TCP pairs carry no job token (Debian's Gloo has no TLS either), or the job's
// own links, where every frame carries the token (LinkCollective). Auto picks the links as soon as
// a Gloo pair could accept a connection from another host; Gloo otherwise, so that jobs on one
// host keep the results (bits) they had before the links could reduce.
#include <string>
#include <vector>

#include "pipewright/enums.h"

namespace pw::dp {

// Where a group's members are: the host part of each member's link address (empty: every member
// runs in this process).
struct GroupSite {
  std::vector<std::string> member_hosts;
};

// True when a member's address is not a loopback one: Gloo would listen where other hosts can
// reach it, with nothing to prove a connection belongs to the job.
bool links_leave_host(const GroupSite& site);

// Auto resolved for `site`: Links when links_leave_host, else Gloo. Gloo and Links stay as given.
// Every member resolves the same site, so they agree.
CpuCollectives resolve_cpu_collectives(CpuCollectives choice, const GroupSite& site);

}  // namespace pw::dp
