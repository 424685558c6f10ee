#pragma once
// A job with parameter servers that a launcher may restart (PW_MAX_RESTARTS > 0), when the servers
// outlive the job's processes (given by /ps/addresses, as `launch --ps` gives them, or run in this
// process with a /ps/dir to reload). Such servers keep every step's pushes across a restart, so a restarted attempt must resume
// from a checkpoint that holds their tables as they stood at its step; one that started again from
// step 0 would meet rows the lost steps updated. So such a job:
//
//   - needs /checkpoints/dir (refused at its start otherwise, in one line naming
//     /checkpoints/dir and /checkpoints/every_steps), unless it resumes /checkpoints/resume, which
//     a restart then goes back to;
//   - writes a checkpoint of step 0 (its initial weights, the servers' tables before any push)
//     before its first step, and every rank waits until that checkpoint is complete before it
//     starts the step. A restart before the first regular checkpoint then resumes from step 0,
//     the servers restored to their first state; one that finds no checkpoint at all knows that
//     no rank pushed anything yet.
#include "rpc/transport.h"
#include "train/checkpointer.h"
#include "train/engine.h"

namespace pw::train {

// Whether a job needs the above. `has_parameter_servers`: its model keeps tables on servers.
bool needs_restart_baseline(const JobConfig& c, bool has_parameter_servers, int max_restarts);

// ConfigError naming /checkpoints/dir when the job needs a baseline and has no checkpoint folder
// (every rank, before its world is made).
void check_restartable(const JobConfig& c, bool has_parameter_servers, int max_restarts);

// Called by every rank before the first step of a job that starts from step 0 (nothing resumed):
// writes the step-0 checkpoint and returns once it is complete on every rank (a no-op unless
// needs_restart_baseline). A checkpoint that cannot be written is an error (InputError, naming it).
void write_restart_baseline(Engine& engine, Checkpointer& checkpointer, const std::vector<double>& loss_history,
                            rpc::Deadline deadline);

}  // namespace pw::train
