#pragma once
// The Transport interface: point-to-point tensor messages between ranks, addressed by a tag.
// Every blocking call takes a deadline; on expiry it throws TimeoutError naming the peer and tag.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/tensor.h"

namespace pw::rpc {

using Deadline = std::chrono::steady_clock::time_point;

// Evaluation: a forward-only activation between stages while evaluating (micro_batch = the
// evaluation batch). Control: small tensors of the job itself (step metrics, gathered weights),
// micro_batch names the message. Collective: a piece of a collective operation among replicas
// (dataparallel/link_collective.h): step = the group's operation number, micro_batch = the
// message within the operation, virtual_stage = the group's id, so that two groups on the same
// ranks, and pipeline traffic, never take each other's messages.
enum class PayloadKind { Activation, Gradient, TiedGradient, Evaluation, Control, Collective };
std::string payload_kind_name(PayloadKind kind);

struct Tag {
  std::int64_t step = 0;
  int micro_batch = 0;   // for TiedGradient: the tied group's index
  PayloadKind kind = PayloadKind::Activation;
  int virtual_stage = 0;   // the receiving virtual stage (TiedGradient: the sending stage)
  friend bool operator==(const Tag&, const Tag&) = default;
};
std::string tag_str(const Tag& tag);   // "activation of micro-batch 3 for virtual stage 2 (step 7)"

// The pipeline's own traffic (activations, gradients, tied gradients): tagged with the training
// step, taken in turn (Transport::expect_frames / begin_step).
inline bool is_pipeline_kind(PayloadKind kind) {
  return kind == PayloadKind::Activation || kind == PayloadKind::Gradient || kind == PayloadKind::TiedGradient;
}

// One pipeline frame a rank's program takes in every step: from `peer`, with this micro-batch,
// kind and virtual stage (a tag without its step).
struct ExpectedFrame {
  int peer = 0;
  int micro_batch = 0;
  PayloadKind kind = PayloadKind::Activation;
  int virtual_stage = 0;
};

using pw::AbortedError;   // pipewright/error.h
using pw::PeerLostError;
using pw::TimeoutError;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Hands `tensor` to `peer`; the caller must not modify it afterwards.
  virtual void send(int peer, const Tag& tag, const kernels::Tensor& tensor, Deadline deadline) = 0;
  // The tensor `peer` sent with `tag`, on the sender's device (the caller moves it).
  virtual kernels::Tensor recv(int peer, const Tag& tag, Deadline deadline) = 0;
  // Makes every pending and future recv of every rank throw AbortedError with `reason`.
  virtual void abort(const std::string& reason) = 0;
  // Turns, for a transport that takes frames from the network: told which pipeline frames this
  // rank's program takes in a step, and which step it is on, it admits a pipeline frame only when
  // it is one of those, for this step or the next, and new in that step; a frame out of turn ends
  // the job as a protocol error naming its sender, and frames of steps that are over are dropped.
  // The in-process links carry only the job's own frames and ignore this.
  virtual void expect_frames(const std::vector<ExpectedFrame>& frames) { (void)frames; }
  virtual void begin_step(std::int64_t step) { (void)step; }
};

}  // namespace pw::rpc
