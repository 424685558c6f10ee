#pragma once
// The exceptions pipewright throws. Catch InputError for bad input (flags, model specs, data
// files, checkpoints, network frames: the message is one line saying what was wrong and what is
// accepted), AbortedError when another rank of the job failed first, and Error for the rest.
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

// Thrown in every waiting rank once one rank has failed, so nobody waits out its deadline.
class AbortedError : public Error {
 public:
  using Error::Error;
};

}  // namespace pw
