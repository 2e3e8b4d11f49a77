// core/ops/unary.cpp: elementwise functions of one tensor (and scalar arithmetic).
//
// All of them share one forward (the backend's `unary`) and one backward node, which calls the
// backend's `unary_backward` with whichever of x or y makes the derivative cheapest. Each op's
// formula, derivative, what it saves and its names are its functor in kernels/unary_ops.h: e.g. tanh
// keeps y because d tanh(x)/dx = 1 - y^2. Adding an op here is one line at the bottom.
#include "core/ops/op_utils.h"
#include <ringgrad/kernels/unary_ops.h>

namespace ringgrad {
namespace {

struct UnaryBackward final : Node {
  kernels::UnaryOp op = kernels::UnaryOp::Neg;
  double alpha = 0.0;
  SavedTensor saved;  // x, y or nothing, as kernels::unary_saved(op) says
  const char* name() const override { return kernels::unary_backward_name(op); }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    if (op == kernels::UnaryOp::AddScalar) return {g[0]};  // d(x + s)/dx = 1: no kernel needed
    const Tensor dy = g[0].contiguous();
    Tensor dx = empty_like(dy);
    const Tensor& s = saved.unpack();
    if (dy.numel() > 0)
      ops::backend_of(dy, name())
          .unary_backward(op, dy.dtype(), s.defined() ? s.data() : nullptr, dy.data(), dx.data(), dy.numel(), alpha,
                          ops::stream_of(dy));
    return {dx};
  }
};

Tensor unary(kernels::UnaryOp op, const Tensor& x, double alpha = 0.0) {
  const char* name = kernels::unary_name(op);
  ops::check_floating(name, x);
  const Tensor xc = x.contiguous();  // kernels see dense memory only
  Tensor y = empty_like(xc);
  if (y.numel() > 0)
    ops::backend_of(x, name).unary(op, x.dtype(), xc.data(), y.data(), x.numel(), alpha, ops::stream_of(x));
  if (needs_grad(x)) {
    auto& node = record<UnaryBackward>(y, {x});
    node.op = op;
    node.alpha = alpha;
    const kernels::unary_ops::Saved s = kernels::unary_saved(op);
    if (s == kernels::unary_ops::Saved::X) node.saved = save(xc);
    if (s == kernels::unary_ops::Saved::Y) node.saved = save(y);
  }
  return y;
}

}  // namespace

Tensor neg(const Tensor& x) { return unary(kernels::UnaryOp::Neg, x); }
Tensor exp(const Tensor& x) { return unary(kernels::UnaryOp::Exp, x); }
Tensor log(const Tensor& x) { return unary(kernels::UnaryOp::Log, x); }
Tensor sqrt(const Tensor& x) { return unary(kernels::UnaryOp::Sqrt, x); }
Tensor pow(const Tensor& x, double exponent) { return unary(kernels::UnaryOp::PowScalar, x, exponent); }
Tensor relu(const Tensor& x) { return unary(kernels::UnaryOp::Relu, x); }
Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  return unary(approximate == GeluApproximate::Tanh ? kernels::UnaryOp::GeluTanh : kernels::UnaryOp::GeluErf, x);
}
Tensor tanh(const Tensor& x) { return unary(kernels::UnaryOp::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(kernels::UnaryOp::Sigmoid, x); }
Tensor silu(const Tensor& x) { return unary(kernels::UnaryOp::Silu, x); }
Tensor add(const Tensor& x, double s) { return unary(kernels::UnaryOp::AddScalar, x, s); }
Tensor mul(const Tensor& x, double s) { return unary(kernels::UnaryOp::MulScalar, x, s); }
Tensor rdiv(double s, const Tensor& x) { return unary(kernels::UnaryOp::RDivScalar, x, s); }

}  // namespace ringgrad
