#include "train/restart_baseline.h"

#include "core/error.h"
#include "train/checkpoint.h"

namespace pw::train {

bool needs_restart_baseline(const JobConfig& c, bool has_parameter_servers, int max_restarts) {
  // Servers that are threads of this process and keep nothing start empty again with it.
  const bool outlive = !c.ps.addresses.empty() || !c.ps.dir.empty();
  return has_parameter_servers && outlive && max_restarts > 0;
}

void check_restartable(const JobConfig& c, bool has_parameter_servers, int max_restarts) {
  // A job resumed from a given checkpoint goes back to it on a restart (servers included) when it
  // has no folder of its own.
  if (!needs_restart_baseline(c, has_parameter_servers, max_restarts) || !c.checkpoints.dir.empty() ||
      !c.checkpoints.resume.empty())
    return;
  throw ConfigError("/checkpoints/dir",
                    "a job with parameter servers that its launcher may restart (max restarts " +
                        std::to_string(max_restarts) +
                        ") needs checkpoints: give /checkpoints/dir and /checkpoints/every_steps. The servers keep "
                        "every step's updates across a restart, so a restart resumes them from a checkpoint; one "
                        "without a checkpoint would train from step 0 against rows the lost steps updated");
}

void write_restart_baseline(Engine& engine, Checkpointer& checkpointer, const std::vector<double>& loss_history,
                            rpc::Deadline deadline) {
  if (!needs_restart_baseline(engine.plan().config, engine.parameter_servers() != nullptr,
                              engine.links().restarts().max_restarts) ||
      !checkpointer.enabled())
    return;
  checkpointer.save(TrainingPosition{0, 0, 0, &loss_history, 0, 0});
  checkpointer.finish();   // rank 0: the manifest is written (or the failure thrown)
  // Rank 0 tells every rank once it is complete: no rank pushes a step before.
  const auto folder = checkpointer.newest(deadline);
  if (folder.empty() || read_manifest(folder).step != 0)
    throw InputError("the checkpoint of step 0 that a restart of a job with parameter servers resumes from was not "
                     "written (see the line above); the job stops rather than risk an inexact restart");
}

}  // namespace pw::train
