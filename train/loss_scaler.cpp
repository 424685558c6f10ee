#include "train/loss_scaler.h"

#include <algorithm>

#include "core/error.h"

namespace pw::train {

LossScaler::LossScaler(Mode mode, double scale, int window)
    : mode_(mode), scale_(mode == Mode::Off ? 1.0 : scale), window_(window) {
  PW_CHECK(scale_ >= kMinScale && window_ >= 1, "loss scale " << scale_ << " / window " << window_);
}

void LossScaler::update(bool overflow) {
  if (mode_ == Mode::Off) return;
  if (overflow) {
    ++overflows_;
    good_steps_ = 0;
    if (mode_ == Mode::Dynamic) scale_ = std::max(kMinScale, scale_ * 0.5);
    return;
  }
  if (mode_ == Mode::Dynamic && ++good_steps_ >= window_) {
    scale_ = std::min(scale_ * 2.0, kMaxScale);
    good_steps_ = 0;
  }
}

void LossScaler::restore(double scale, std::int64_t good_steps) {
  if (mode_ != Mode::Dynamic) return;
  scale_ = std::max(kMinScale, scale);
  good_steps_ = good_steps;
}

}  // namespace pw::train
