#include "train/monitor/tensorboard_writer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <system_error>

#include "core/error.h"
#include "tensorboard_event.pb.h"

namespace pw::monitor {
namespace {

std::filesystem::path new_event_file(const std::filesystem::path& folder) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  PW_INPUT_CHECK(!ec && std::filesystem::is_directory(folder),
                 folder.string() << ": cannot use it as the TensorBoard folder: "
                                 << (ec ? ec.message() : std::string("it is not a folder")));
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const auto seconds = static_cast<long long>(wall_time_now());
  const std::string stem = "events.out.tfevents." + std::to_string(seconds) + "." + host + "." +
                           std::to_string(getpid()) + ".pipewright";
  // Two writers of one process in one second (a test): number the second.
  std::filesystem::path path = folder / stem;
  for (int n = 1; std::filesystem::exists(path); ++n) path = folder / (stem + "." + std::to_string(n));
  return path;
}

}  // namespace

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& folder) : records_(new_event_file(folder)) {
  tensorboard::Event version;
  version.set_wall_time(wall_time_now());
  version.set_file_version("brain.Event:2");
  records_.write(version.SerializeAsString());
}

void TensorBoardWriter::write(std::int64_t step, const Scalars& scalars) { write(step, scalars, wall_time_now()); }

void TensorBoardWriter::write(std::int64_t step, const Scalars& scalars, double wall_time) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    auto* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  records_.write(event.SerializeAsString());
}

}  // namespace pw::monitor
