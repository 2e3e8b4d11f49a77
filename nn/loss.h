/// @file
/// nn/loss.h: loss modules over core's fused cross_entropy and mse_loss.
#pragma once

#include <ringgrad/core/base/arg.h>
#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace nn {

/// CrossEntropyLoss's settings, as PyTorch's: how the per-row losses are reduced, and label smoothing.
struct CrossEntropyLossOptions {
  RINGGRAD_ARG(Reduction, reduction) = Reduction::Mean;  ///< mean, sum, or one loss per row
  RINGGRAD_ARG(double, label_smoothing) = 0.0;  ///< eps: the target puts 1 - eps on the label, eps spread evenly
};

/// Logits (N, C) against int64 class indices (N), as torch.nn.CrossEntropyLoss.
class CrossEntropyLoss {
 public:
  /// By default: the mean over the batch, no label smoothing.
  explicit CrossEntropyLoss(CrossEntropyLossOptions options = {}) : options(options) {}
  /// cross_entropy(logits, labels) with the options' reduction and label smoothing.
  Tensor operator()(const Tensor& logits, const Tensor& labels) const {
    return cross_entropy(logits, labels, options.reduction(), options.label_smoothing());
  }
  CrossEntropyLossOptions options;  ///< as given
};

/// Mean squared error, as torch.nn.MSELoss.
class MSELoss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction(reduction) {}  ///< how to reduce
  /// mse_loss(input, target, reduction); target must have input's shape.
  Tensor operator()(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, reduction); }
  Reduction reduction;  ///< as given
};

}  // namespace nn
}  // namespace ringgrad
