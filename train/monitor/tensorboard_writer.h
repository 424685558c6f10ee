#pragma once
// Scalars for TensorBoard: one event file in a folder, its first record the file version, then one
// Event per step holding that step's scalars as a Summary (TensorFlow's messages and field numbers,
// serialised by protobuf; train/monitor/tensorboard_event.proto).
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "train/monitor/tfrecord_writer.h"

namespace pw::monitor {

using Scalars = std::vector<std::pair<std::string, double>>;   // tag -> value

class TensorBoardWriter {
 public:
  // Creates `folder` if needed and a new event file in it, named as TensorFlow names them
  // ("events.out.tfevents.<seconds>.<host>.<pid>.pipewright"), so TensorBoard finds it and a
  // second run beside it adds a file rather than overwriting one. InputError naming the folder.
  explicit TensorBoardWriter(const std::filesystem::path& folder);

  void write(std::int64_t step, const Scalars& scalars);                       // now
  void write(std::int64_t step, const Scalars& scalars, double wall_time);     // seconds since the epoch
  const std::filesystem::path& path() const { return records_.path(); }

 private:
  TfRecordWriter records_;
};

// Seconds since the epoch, as Event.wall_time holds them.
double wall_time_now();

}  // namespace pw::monitor
