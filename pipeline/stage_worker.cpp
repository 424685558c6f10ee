#include "pipeline/stage_worker.h"

#include "core/error.h"

namespace pw::pipeline {

StageWorker::StageWorker() : thread_([this] { loop(); }) {}

StageWorker::~StageWorker() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::future<void> StageWorker::submit(std::function<void()> job) {
  std::packaged_task<void()> task(std::move(job));
  auto done = task.get_future();
  {
    std::lock_guard lock(mutex_);
    PW_CHECK(!job_.has_value(), "stage worker is still busy with the previous job");
    job_.emplace(std::move(task));
  }
  wake_.notify_all();
  return done;
}

void StageWorker::loop() {
  while (true) {
    std::packaged_task<void()> task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || job_.has_value(); });
      if (!job_.has_value()) return;
      task = std::move(*job_);
      job_.reset();
    }
    task();   // exceptions land in the future
  }
}

}  // namespace pw::pipeline
