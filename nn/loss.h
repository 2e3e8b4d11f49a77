// nn/loss.h: loss modules over core's fused cross_entropy and mse_loss.
#pragma once

#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace nn {

struct CrossEntropyLossOptions {
  CrossEntropyLossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  CrossEntropyLossOptions& label_smoothing(double eps) {
    label_smoothing_ = eps;
    return *this;
  }
  Reduction reduction_ = Reduction::Mean;
  double label_smoothing_ = 0.0;
};

// Logits (N, C) against int64 class indices (N), as torch.nn.CrossEntropyLoss.
class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(CrossEntropyLossOptions options = {}) : options(options) {}
  Tensor operator()(const Tensor& logits, const Tensor& labels) const {
    return cross_entropy(logits, labels, options.reduction_, options.label_smoothing_);
  }
  CrossEntropyLossOptions options;
};

class MSELoss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, reduction); }
  Reduction reduction;
};

}  // namespace nn
}  // namespace ringgrad
