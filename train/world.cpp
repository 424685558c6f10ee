#include "train/world.h"

#include <algorithm>
#include <set>
#include <thread>

#include "core/error.h"
#include "dataparallel/cpu_collectives.h"
#include "dataparallel/gloo_collective.h"
#include "dataparallel/host_staged_collective.h"
#include "dataparallel/link_collective.h"
#include "dataparallel/nccl_collective.h"
#include "kernels/cuda_probe.h"
#include "rpc/host_port.h"

namespace pw::train {

std::string RankLinks::name() const {
  return "rank " + std::to_string(rank_) + " (stage " + std::to_string(stage()) + ", replica " +
         std::to_string(replica()) + ")";
}

namespace {

// The members' hosts, from the link addresses a world of processes knows (a world of threads
// knows none: every member is in this process).
dp::GroupSite group_site(const std::vector<int>& members, const std::vector<std::string>& addresses) {
  dp::GroupSite site;
  if (addresses.empty()) return site;
  for (int m : members)
    site.member_hosts.push_back(rpc::parse_host_port(addresses.at(static_cast<std::size_t>(m))).host);
  return site;
}

}  // namespace

std::shared_ptr<dp::Collective> RankLinks::make_collective(const std::vector<int>& members, kernels::Device device,
                                                           const std::string& key, std::chrono::milliseconds timeout,
                                                           dp::CpuCollectives cpu) {
  const auto at = std::find(members.begin(), members.end(), rank_);
  PW_CHECK(at != members.end(), name() << " is not a member of collective group '" << key << "'");
  const int index = static_cast<int>(at - members.begin());
  const int size = static_cast<int>(members.size());
  const auto host_collective = [&]() -> std::unique_ptr<dp::Collective> {
    const auto choice = dp::resolve_cpu_collectives(cpu, group_site(members, addresses()));
    collectives_ = std::string(enum_name(choice)) + (device.is_cpu() ? "" : " via host");
    if (choice == dp::CpuCollectives::Links)
      return std::make_unique<dp::LinkCollective>(transport(), members, key, timeout);
    return std::make_unique<dp::GlooCollective>(index, size, store(), key, bind_host(), timeout);
  };
  if (device.is_cpu()) return host_collective();
  // NCCL refuses two members of one communicator on the same physical GPU ("Duplicate GPU"): every
  // member publishes its GPU's UUID, and a group with a shared GPU reduces on the host.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  store().set(key + "gpu/" + std::to_string(index), kernels::cuda_device_uuid(device.index));
  std::set<std::string> gpus;
  for (int m = 0; m < size; ++m) gpus.insert(get(key + "gpu/" + std::to_string(m), deadline));
  if (static_cast<int>(gpus.size()) == size) {
    collectives_ = "nccl";
    return dp::make_nccl_collective(index, size, device, store(), key + "nccl", timeout);
  }
  return std::make_shared<dp::HostStagedCollective>(host_collective(), device);
}

void RankLinks::barrier(const std::string& name, rpc::Deadline deadline) { store_barrier(name, deadline); }

std::string RankLinks::get(const std::string& key, rpc::Deadline deadline) {
  while (true) {
    if (cancel_token().cancelled()) throw rpc::AbortedError(cancel_token().reason());
    const auto now = std::chrono::steady_clock::now();
    try {
      return store().get(key, std::min(deadline, now + std::chrono::milliseconds(100)));
    } catch (const rpc::TimeoutError&) {
      if (std::chrono::steady_clock::now() >= deadline)
        throw rpc::TimeoutError(name() + ": waited for '" + key + "' from another rank until the deadline");
    }
  }
}

// Every rank sets its key, then waits for every other rank's, in short slices so that a
// cancelled job does not wait out the deadline.
void RankLinks::store_barrier(const std::string& name, rpc::Deadline deadline) {
  auto& s = store();
  s.set("barrier/" + name + "/" + std::to_string(rank_), "1");
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank_) continue;
    try {
      get("barrier/" + name + "/" + std::to_string(r), deadline);
    } catch (const rpc::TimeoutError&) {
      throw rpc::TimeoutError(this->name() + ": barrier '" + name + "': rank " + std::to_string(r) +
                              " did not arrive in time");
    }
  }
}

}  // namespace pw::train
