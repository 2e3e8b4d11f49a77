// core/ops/layernorm.cpp: layer_norm over the last dimension.
//
//   mu = mean(x),  var = mean((x - mu)^2),  y = (x - mu) / sqrt(var + eps) * weight + bias
// Written as a composition of differentiable ops, so its backward is derived by the engine (and
// checked by gradcheck), and it runs on every backend, CUDA included, with no kernel of its own. It
// costs several passes over x; a fused kernel per direction would need a LayerNorm entry in
// kernels/backend.h, which does not exist yet.
#include "core/ops/op_utils.h"

namespace ringgrad {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  ops::check_floating("layer_norm", x);
  RINGGRAD_CHECK(x.dim() >= 1, "layer_norm: expected x with at least 1 dim, got a 0-d tensor");
  RINGGRAD_CHECK(eps >= 0, "layer_norm: expected eps >= 0, got ", eps);
  const int64_t c = x.size(-1);
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    ops::check_same("layer_norm", x, *p, "x", p == &weight ? "weight" : "bias");
    RINGGRAD_CHECK(p->dim() == 1 && p->size(0) == c, "layer_norm: expected ", p == &weight ? "weight" : "bias",
                   " of shape [", c, "] (x's last dim), got ", p->shape());
  }
  const Tensor centered = x - mean(x, {-1}, /*keepdim=*/true);
  const Tensor variance = mean(centered * centered, {-1}, /*keepdim=*/true);
  Tensor y = centered * pow(variance + eps, -0.5);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

}  // namespace ringgrad
