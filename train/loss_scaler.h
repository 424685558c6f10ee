#pragma once
// Loss scaling for fp16 training (torch.cuda.amp.GradScaler, DeepSpeed's DynamicLossScaler): the
// loss gradient is multiplied by scale() so that small fp16 activation gradients do not flush to
// zero; the step guard divides the F32 gradients by it again before clipping and the update. A
// step whose gradients overflowed is skipped by every rank (the guard's verdict is job-wide) and,
// in dynamic mode, halves the scale; `window` steps in a row without overflow double it. Every
// rank feeds its scaler the same verdicts, so all ranks hold the same scale without talking.
#include <cstdint>

namespace pw::train {

class LossScaler {
 public:
  enum class Mode { Off, Fixed, Dynamic };
  static constexpr double kMinScale = 1.0;   // a dynamic scale never falls below this
  // Nor does it grow above 2^24 by itself: beyond it an F32 sum of scaled gradients loses its low
  // bits for nothing. Only an initial scale starts above it.
  static constexpr double kMaxScale = 16777216.0;

  LossScaler() = default;   // Off: scale 1
  LossScaler(Mode mode, double scale, int window);

  Mode mode() const { return mode_; }
  double scale() const { return scale_; }
  // An overflow the scale is to blame for (dynamic mode, above the floor): the caller skips the
  // step without counting it as a bad one. At the floor, or in fixed mode, an overflow is a bad step.
  bool absorbs_overflow() const { return mode_ == Mode::Dynamic && scale_ > kMinScale; }
  // After each step: whether its gradients were not finite.
  void update(bool overflow);
  std::int64_t good_steps() const { return good_steps_; }   // since the last change of scale
  std::int64_t overflows() const { return overflows_; }
  // Checkpoints carry the scale and the run of good steps.
  void restore(double scale, std::int64_t good_steps);

 private:
  Mode mode_ = Mode::Off;
  double scale_ = 1.0;
  int window_ = 2000;
  std::int64_t good_steps_ = 0;
  std::int64_t overflows_ = 0;
};

}  // namespace pw::train
