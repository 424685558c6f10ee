#include "train/replica_rows_exchange.h"

#include "core/error.h"

namespace pw::train {

std::vector<std::vector<dp::PendingRows>> exchange_pending_rows(rpc::Transport& control, const std::vector<int>& group,
                                                                int self, const std::vector<dp::PendingRows>& mine,
                                                                std::int64_t round, ReplicaRowsMessages messages,
                                                                rpc::Deadline deadline) {
  const auto tag = [&](int message, std::size_t layer) {
    return rpc::Tag{round, message, rpc::PayloadKind::Control, static_cast<int>(layer)};
  };
  for (int peer : group) {
    if (peer == self) continue;
    for (std::size_t l = 0; l < mine.size(); ++l) {
      const auto& p = mine[l];
      const auto n = static_cast<std::int64_t>(p.keys.size());
      control.send(peer, tag(messages.keys, l), kernels::Tensor::from_vector(p.keys, {n}), deadline);
      control.send(peer, tag(messages.rows, l),
                   kernels::Tensor::from_vector(p.rows, {static_cast<std::int64_t>(p.rows.size())}), deadline);
    }
  }
  std::vector<std::vector<dp::PendingRows>> all;
  all.reserve(group.size());
  for (int peer : group) {
    if (peer == self) {
      all.push_back(mine);
      continue;
    }
    std::vector<dp::PendingRows> theirs(mine.size());
    for (std::size_t l = 0; l < mine.size(); ++l) {
      const auto keys = control.recv(peer, tag(messages.keys, l), deadline);
      const auto rows = control.recv(peer, tag(messages.rows, l), deadline);
      PW_CHECK(keys.dtype() == kernels::DType::I64 && rows.dtype() == kernels::DType::F32,
               "rows for the parameter servers from rank " << peer << ": got " << keys.describe() << " and "
                                                           << rows.describe());
      const std::int64_t* k = keys.data<std::int64_t>();
      const float* r = rows.data<float>();
      theirs[l].keys.assign(k, k + keys.numel());
      theirs[l].rows.assign(r, r + rows.numel());
    }
    all.push_back(std::move(theirs));
  }
  return all;
}

}  // namespace pw::train
