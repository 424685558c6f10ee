#pragma once
// The parameter servers a launcher runs for its job (LaunchSpec::servers): started once before the
// first rank, each from its JSON config file (kept in a temporary folder the group owns), watched
// with the ranks, started again on the same port after one ended, stopped at the end (SIGTERM, so
// that each writes its last snapshot; SIGKILL after 3 s).
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "train/launcher/launch_spec.h"
#include "train/launcher/rank_process.h"

namespace pw::launcher {

class ParameterServerGroup {
 public:
  using Say = std::function<void(const std::string&)>;
  // Starts every server and waits until each listens. InputError for a bad update mode or table
  // bound (before any starts), or for a server that ended or did not listen within 30 s.
  ParameterServerGroup(const ServerLaunch& spec, const std::string& job_token, Say say, std::mutex& output_mutex);
  ~ParameterServerGroup();   // kills the servers still running and removes the config files; never throws
  ParameterServerGroup(const ParameterServerGroup&) = delete;
  ParameterServerGroup& operator=(const ParameterServerGroup&) = delete;

  const std::string& addresses() const { return addresses_; }   // "127.0.0.1:P,127.0.0.1:Q", the ranks' /ps/addresses
  // The servers that ended since the last call (reaped; status set).
  std::vector<const RankProcess*> reap_ended();
  // Starts every server that ended again, on its port (from its snapshot, with a dir).
  void restart_ended();
  void stop();

 private:
  void start(int shard);
  void wait_listening(int shard);

  ServerLaunch spec_;
  std::string token_;
  Say say_;
  std::mutex& output_mutex_;
  std::string folder_;   // the config files
  std::vector<int> ports_;
  std::vector<std::unique_ptr<RankProcess>> servers_;
  std::string addresses_;
};

}  // namespace pw::launcher
