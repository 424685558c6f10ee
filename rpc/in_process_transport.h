#pragma once
// Transport between threads of one process: one Mailbox per rank. Sends never block; receives
// wait until the message or the deadline.
#include <memory>
#include <vector>

#include "rpc/mailbox.h"
#include "rpc/transport.h"

namespace pw::rpc {

class InProcessHub {
 public:
  explicit InProcessHub(int world_size);
  std::unique_ptr<Transport> endpoint(int rank);
  int world_size() const { return static_cast<int>(mailboxes_.size()); }

  void post(int from, int to, const Tag& tag, const kernels::Tensor& tensor);
  kernels::Tensor take(int from, int to, const Tag& tag, Deadline deadline);
  void abort(const std::string& reason);   // every rank's receives throw AbortedError
  void reset();   // clears an abort and any undelivered messages (between steps)

 private:
  Mailbox& mailbox(int rank);
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;
};

}  // namespace pw::rpc
