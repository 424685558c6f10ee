#pragma once
// The exceptions pipewright throws. Catch InputError for bad input (flags, model specs, data
// files, checkpoints, network frames: the message is one line saying what was wrong and what is
// accepted), TrainingFailed for a job that ran but did not train, AbortedError when another rank
// of the job failed first, and Error for the rest.
#include <stdexcept>
#include <string>

namespace pw {

// A failure inside pipewright or a library it calls; internal checks add file:line and the expression.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input: one line that says what was wrong and what is accepted.
class InputError : public Error {
 public:
  using Error::Error;
};

// A blocking wait ran past its deadline; the message names the rank, stage, micro-batch and what it waited for.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer's connection broke or could not be made: often the echo of that peer's death, which the
// job's failure detection then names.
class PeerLostError : public Error {
 public:
  using Error::Error;
};

// The job ran but did not train: it diverged (non-finite weights or test loss), gave up after its
// rollbacks, or skipped every step (fp16 overflow on every step). The message is one line naming
// the cause; the summary, when one is written, records it as `status` and `failure`. The
// pipewright command exits with status 6 for it.
class TrainingFailed : public Error {
 public:
  using Error::Error;
};

// Thrown in every waiting rank once one rank has failed, so nobody waits out its deadline.
class AbortedError : public Error {
 public:
  using Error::Error;
};

}  // namespace pw
