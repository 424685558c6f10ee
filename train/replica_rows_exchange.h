#pragma once
// The rows a stage's replicas are about to push to the parameter servers, shown to each other:
// every replica sends its own to the other members of its stage group and receives theirs, so each
// can compute the norm of their sum (dp::RemoteRowsRegistry::ReplicaExchange). Over the job's
// control transport: per server-backed layer, its keys (I64) then its rows (F32).
#include <cstdint>
#include <vector>

#include "dataparallel/ps/remote_rows.h"
#include "rpc/transport.h"

namespace pw::train {

struct ReplicaRowsMessages {
  int keys;   // Tag::micro_batch of the keys; Tag::virtual_stage is the layer's index
  int rows;   // ... of the rows
};

// `group`: the world ranks of the stage's replicas, by replica; `self`: this rank (one of them).
// Returns every replica's rows, by replica, this one's included. Every member calls it with the
// same `round` (and the same layer count).
std::vector<std::vector<dp::PendingRows>> exchange_pending_rows(rpc::Transport& control, const std::vector<int>& group,
                                                                int self, const std::vector<dp::PendingRows>& mine,
                                                                std::int64_t round, ReplicaRowsMessages messages,
                                                                rpc::Deadline deadline);

}  // namespace pw::train
