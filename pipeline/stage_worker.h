#pragma once
// A persistent thread that runs one stage's work. Stages keep their thread across steps so that
// per-thread state (the OpenMP team oneDNN uses, CUDA handles, the current stream) is made once.
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

namespace pw::pipeline {

class StageWorker {
 public:
  StageWorker();
  ~StageWorker();   // finishes the job in hand, then joins
  StageWorker(const StageWorker&) = delete;
  StageWorker& operator=(const StageWorker&) = delete;

  std::future<void> submit(std::function<void()> job);

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::optional<std::packaged_task<void()>> job_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace pw::pipeline
