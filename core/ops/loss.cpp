// core/ops/loss.cpp: cross_entropy (fused) and mse_loss.
//
// cross_entropy computes log_softmax and the negative log-likelihood in one pass per row and keeps
// the softmax probabilities p for the backward, which is then one subtraction:
//   loss_r = logsumexp(x_r) - (1 - eps) x_r[label_r] - eps mean(x_r)
//   dx_r   = p_r - (1 - eps) onehot(label_r) - eps / C          (times the incoming gradient)
// With label smoothing eps = 0 this is PyTorch's F.cross_entropy exactly.
#include <cmath>

#include "core/ops/op_utils.h"

namespace ringgrad {
namespace {

struct CrossEntropyBackward final : Node {
  SavedTensor probs, labels;
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;
  const char* name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor& p = probs.unpack();
    const Tensor dloss = g[0].contiguous();
    const int64_t rows = p.size(0), c = p.size(1);
    Tensor dlogits = empty_like(p);
    // Mean and Sum reduce to one number, read by every row (stride 0); None has one per row.
    const int64_t dloss_stride = reduction == Reduction::None ? 1 : 0;
    const double scale = reduction == Reduction::Mean ? 1.0 / static_cast<double>(rows) : 1.0;
    if (p.numel() > 0)
      ops::backend_of(p, name()).cross_entropy_backward(p.dtype(), p.data(), ops::index_data(labels.unpack()),
                                                        dloss.data(), dloss_stride, scale, dlogits.data(), rows, c,
                                                        label_smoothing, ops::stream_of(p));
    return {dlogits, Tensor()};
  }
};

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, Reduction reduction, double label_smoothing) {
  ops::check_floating("cross_entropy", logits, "logits");
  ops::check_defined("cross_entropy", labels, "labels");
  RINGGRAD_CHECK(logits.dim() == 2, "cross_entropy: expected logits of shape (N, C), got ", logits.shape());
  RINGGRAD_CHECK(labels.dtype() == DType::i64, "cross_entropy: expected labels of dtype int64, got ", labels.dtype());
  RINGGRAD_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0), "cross_entropy: expected labels of shape [",
                 logits.size(0), "] (one per row of logits ", logits.shape(), "), got ", labels.shape());
  RINGGRAD_CHECK(labels.device() == logits.device(), "cross_entropy: expected labels on ", logits.device(),
                 " (the logits' device), got ", labels.device());
  RINGGRAD_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
                 "cross_entropy: expected label_smoothing in [0, 1], got ", label_smoothing);
  const int64_t rows = logits.size(0), c = logits.size(1);
  const Tensor x = logits.contiguous();
  const Tensor y = labels.contiguous();
  // A bad label would read out of bounds: check before the kernel. On a GPU the check would cost a
  // host synchronisation per step; the CUDA kernel writes NaN into that row's loss instead.
  if (y.device().is_cpu()) {
    const int64_t* label = y.data<int64_t>();
    for (int64_t r = 0; r < rows; ++r)
      RINGGRAD_CHECK(label[r] >= 0 && label[r] < c, "cross_entropy: expected labels in [0, ", c, ") for ", c,
                     " classes, got ", label[r], " at index ", r);
  }
  const TensorOptions like = TensorOptions(x.dtype()).device(x.device());
  Tensor loss_rows = empty({rows}, like);
  Tensor probs = empty({rows, c}, like);
  if (rows > 0)
    ops::backend_of(x, "cross_entropy")
        .cross_entropy_forward(x.dtype(), x.data(), ops::index_data(y), loss_rows.data(), probs.data(), rows, c,
                               label_smoothing, ops::stream_of(x));
  Tensor out = loss_rows;
  if (reduction != Reduction::None) {
    NoGradGuard no_grad;  // this op's own node covers the reduction
    out = sum(loss_rows);
    if (reduction == Reduction::Mean) out = out * (rows == 0 ? NAN : 1.0 / static_cast<double>(rows));
  }
  if (needs_grad(logits)) {
    auto& node = record<CrossEntropyBackward>(out, {logits, labels});
    node.probs = save(probs);
    node.labels = save(y);
    node.reduction = reduction;
    node.label_smoothing = label_smoothing;
  }
  return out;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  ops::check_floating("mse_loss", input, "input");
  ops::check_floating("mse_loss", target, "target");
  ops::check_same("mse_loss", input, target, "input", "target");
  RINGGRAD_CHECK(input.shape() == target.shape(), "mse_loss: expected target of shape ", input.shape(),
                 " (the input's shape), got ", target.shape());
  // Composed of differentiable ops, so its backward, 2 (input - target) g / n, comes for free.
  const Tensor diff = input - target;
  Tensor squared = diff * diff;  // not const, so `return squared` can move it
  if (reduction == Reduction::None) return squared;
  return reduction == Reduction::Sum ? sum(squared) : mean(squared);
}

}  // namespace ringgrad
