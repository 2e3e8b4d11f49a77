// core/ops/unary.cpp: elementwise functions of one tensor (and scalar arithmetic).
//
// All of them share one forward (the backend's `unary`) and one backward node, which calls the
// backend's `unary_backward` with whichever of x or y makes the derivative cheapest (listed next to
// each op in kernels/backend.h): e.g. tanh keeps y because d tanh(x)/dx = 1 - y^2.
#include "core/ops/op_utils.h"

namespace ringgrad {
namespace {

enum class Saved { None, Input, Output };

Saved saved_for(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
    case UnaryOp::AddScalar:
    case UnaryOp::MulScalar: return Saved::None;
    case UnaryOp::Log:
    case UnaryOp::GeluTanh:
    case UnaryOp::GeluErf:
    case UnaryOp::RDivScalar:
    case UnaryOp::PowScalar: return Saved::Input;
    case UnaryOp::Exp:
    case UnaryOp::Sqrt:
    case UnaryOp::Relu:
    case UnaryOp::Tanh:
    case UnaryOp::Sigmoid: return Saved::Output;
  }
  return Saved::Input;
}

const char* backward_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "NegBackward";
    case UnaryOp::Exp: return "ExpBackward";
    case UnaryOp::Log: return "LogBackward";
    case UnaryOp::Sqrt: return "SqrtBackward";
    case UnaryOp::Relu: return "ReluBackward";
    case UnaryOp::GeluTanh:
    case UnaryOp::GeluErf: return "GeluBackward";
    case UnaryOp::Tanh: return "TanhBackward";
    case UnaryOp::Sigmoid: return "SigmoidBackward";
    case UnaryOp::AddScalar: return "AddScalarBackward";
    case UnaryOp::MulScalar: return "MulScalarBackward";
    case UnaryOp::RDivScalar: return "RDivScalarBackward";
    case UnaryOp::PowScalar: return "PowBackward";
  }
  return "UnaryBackward";
}

struct UnaryBackward final : Node {
  UnaryOp op = UnaryOp::Neg;
  double alpha = 0.0;
  SavedTensor saved;  // x or y, see saved_for()
  const char* name() const override { return backward_name(op); }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    if (op == UnaryOp::AddScalar) return {g[0]};  // d(x + s)/dx = 1: no kernel needed
    const Tensor dy = g[0].contiguous();
    Tensor dx = empty_like(dy);
    const Tensor& s = saved.unpack();
    if (dy.numel() > 0)
      ops::backend_of(dy, name()).unary_backward(op, dy.dtype(), s.defined() ? s.data() : nullptr, dy.data(),
                                                 dx.data(), dy.numel(), alpha, ops::stream_of(dy));
    return {dx};
  }
};

Tensor unary(UnaryOp op, const char* name, const Tensor& x, double alpha = 0.0) {
  ops::check_floating(name, x);
  const Tensor xc = x.contiguous();  // kernels see dense memory only
  Tensor y = empty_like(xc);
  if (y.numel() > 0)
    ops::backend_of(x, name).unary(op, x.dtype(), xc.data(), y.data(), x.numel(), alpha, ops::stream_of(x));
  if (needs_grad(x)) {
    auto& node = record<UnaryBackward>(y, {x});
    node.op = op;
    node.alpha = alpha;
    const Saved s = saved_for(op);
    if (s == Saved::Input) node.saved = save(xc);
    if (s == Saved::Output) node.saved = save(y);
  }
  return y;
}

}  // namespace

Tensor neg(const Tensor& x) { return unary(UnaryOp::Neg, "neg", x); }
Tensor exp(const Tensor& x) { return unary(UnaryOp::Exp, "exp", x); }
Tensor log(const Tensor& x) { return unary(UnaryOp::Log, "log", x); }
Tensor sqrt(const Tensor& x) { return unary(UnaryOp::Sqrt, "sqrt", x); }
Tensor pow(const Tensor& x, double exponent) { return unary(UnaryOp::PowScalar, "pow", x, exponent); }
Tensor relu(const Tensor& x) { return unary(UnaryOp::Relu, "relu", x); }
Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  return unary(approximate == GeluApproximate::Tanh ? UnaryOp::GeluTanh : UnaryOp::GeluErf, "gelu", x);
}
Tensor tanh(const Tensor& x) { return unary(UnaryOp::Tanh, "tanh", x); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::Sigmoid, "sigmoid", x); }
Tensor add(const Tensor& x, double s) { return unary(UnaryOp::AddScalar, "add", x, s); }
Tensor mul(const Tensor& x, double s) { return unary(UnaryOp::MulScalar, "mul", x, s); }
Tensor rdiv(double s, const Tensor& x) { return unary(UnaryOp::RDivScalar, "div", x, s); }

}  // namespace ringgrad
