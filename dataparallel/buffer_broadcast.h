#pragma once
// Replica 0's non-trained state (batch-norm running statistics) to every replica of a stage after
// each step: the buffers packed back to back, one collective call per dtype and device, then
// unpacked. A call per buffer paid a collective's latency each (resnet18: about 60 calls a step,
// most of a two-replica CPU job's time outside its compute).
#include <vector>

#include "dataparallel/collective.h"
#include "models/layer.h"

namespace pw::dp {

void broadcast_buffers(Collective& collective, const std::vector<models::Buffer*>& buffers, int root);

}  // namespace pw::dp
