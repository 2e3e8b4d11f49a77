// core/ops/softmax.cpp: softmax and log_softmax over one dimension.
//
//   softmax      y = e^(x - max) / sum e^(x - max)     dx = y (dy - sum(dy y))
//   log_softmax  y = x - max - log sum e^(x - max)     dx = dy - e^y sum(dy)
// Subtracting the max keeps e^x from overflowing; both backwards need only y, so x is not saved.
#include "core/ops/op_utils.h"

namespace ringgrad {
namespace {

struct Layout {
  int64_t outer = 1, c = 1, inner = 1;
};

Layout layout_of(const Shape& shape, int64_t dim) {
  Layout l;
  for (int64_t i = 0; i < shape.size(); ++i) {
    if (i < dim)
      l.outer *= shape[i];
    else if (i == dim)
      l.c = shape[i];
    else
      l.inner *= shape[i];
  }
  return l;
}

struct SoftmaxBackward final : Node {
  SavedTensor y;
  int64_t dim = 0;
  bool log = false;
  const char* name() const override { return log ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor dy = g[0].contiguous();
    const Tensor& y0 = y.unpack();
    Tensor dx = empty_like(dy);
    const Layout l = layout_of(y0.shape(), dim);
    if (dx.numel() > 0)
      ops::backend_of(dy, name())
          .softmax_backward(dy.dtype(), y0.data(), dy.data(), dx.data(), l.outer, l.c, l.inner, log,
                            ops::stream_of(dy));
    return {dx};
  }
};

Tensor softmax_impl(const Tensor& x, int64_t dim_in, bool log, const char* name) {
  ops::check_floating(name, x);
  const Tensor xc = x.contiguous();
  const int64_t dim = x.dim() == 0 ? 0 : ops::wrap_dim(dim_in, x.dim(), name);
  const Layout l = x.dim() == 0 ? Layout{} : layout_of(x.shape(), dim);
  Tensor y = empty_like(xc);
  if (y.numel() > 0)
    ops::backend_of(x, name).softmax(x.dtype(), xc.data(), y.data(), l.outer, l.c, l.inner, log, ops::stream_of(x));
  if (needs_grad(x)) {
    auto& node = record<SoftmaxBackward>(y, {x});
    node.y = save(y);
    node.dim = dim;
    node.log = log;
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false, "softmax"); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true, "log_softmax"); }

}  // namespace ringgrad
