#include "pipeline/optimistic_update.h"

#include "kernels/ops/elementwise.h"

namespace pw::pipeline {

void update_dense(models::Optimizer& optimizer, const std::vector<models::Parameter*>& params, double gradient_scale) {
  if (gradient_scale != 1.0)
    for (auto* p : params) kernels::scale_inplace(p->grad, gradient_scale);
  optimizer.step();
}

void OptimisticUpdate::apply(models::Optimizer& optimizer, const std::vector<models::Parameter*>& params,
                             double gradient_scale) {
  PW_CHECK(!saved_, "an optimistic update was applied while the previous one was neither kept nor undone");
  saved_ = optimizer.snapshot();
  gradients_.clear();
  if (gradient_scale != 1.0)
    for (auto* p : params) gradients_.push_back(p->grad.clone());
  update_dense(optimizer, params, gradient_scale);
}

void OptimisticUpdate::keep() {
  saved_.reset();
  gradients_.clear();
}

void OptimisticUpdate::undo(models::Optimizer& optimizer, const std::vector<models::Parameter*>& params) {
  PW_CHECK(saved_, "no optimistic update to undo");
  optimizer.restore(*saved_);
  if (!gradients_.empty()) {
    PW_CHECK(gradients_.size() == params.size(),
             "undoing an update of " << gradients_.size() << " gradients on " << params.size() << " parameters");
    for (std::size_t i = 0; i < params.size(); ++i) params[i]->grad.copy_from(gradients_[i]);
  }
  keep();
}

}  // namespace pw::pipeline
