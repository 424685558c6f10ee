#pragma once
// Streams and events. On CUDA a Stream owns a cudaStream_t and an Event a cudaEvent_t; on CPU
// ops run synchronously on the calling thread, so both are trivially complete.
// Neither can be copied; both can be moved.
#include <memory>

#include "kernels/device.h"

namespace pw::kernels {

class Stream {
 public:
  explicit Stream(Device device);   // creates a new non-blocking stream on CUDA devices
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device device() const { return device_; }
  void* native() const { return handle_; }   // cudaStream_t on CUDA, nullptr on CPU
  void synchronize() const;

 private:
  Device device_;
  void* handle_ = nullptr;
};

class Event {
 public:
  explicit Event(Device device);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void wait_on(const Stream& stream) const;   // `stream` waits for this event (no host sync)
  void synchronize() const;
  bool done() const;
  // Milliseconds between two recorded events (both must be complete).
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  Device device_;
  void* handle_ = nullptr;
  double cpu_time_ms_ = 0.0;
};

// The stream ops on `device` launch on from this thread: the device's default stream unless a
// StreamGuard set another. Pipeline stages sharing one GPU each hold a guard for their stream.
Stream& current_stream(Device device);

class StreamGuard {
 public:
  explicit StreamGuard(Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream* previous_;
  Device device_;
};

}  // namespace pw::kernels
