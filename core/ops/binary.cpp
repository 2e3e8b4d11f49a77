// core/ops/binary.cpp: add, sub, mul, div with NumPy/PyTorch broadcasting.
//
// Broadcasting costs no copies: each input is handed to the kernel with stride 0 along the
// dimensions where it is stretched. The backward sums the gradient back over those dimensions
// (sum_to), because every stretched element contributed to several outputs.
//   d(a+b) = (g, g)   d(a-b) = (g, -g)   d(a*b) = (g b, g a)   d(a/b) = (g / b, -g a / b^2)
#include "core/ops/op_utils.h"

namespace ringgrad {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int64_t n = std::max(a.size(), b.size());
  Shape out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    RINGGRAD_CHECK(da == db || da == 1 || db == 1, op, ": expected shapes that broadcast, got a ", a, " and b ", b,
                   " (sizes ", da, " and ", db, " differ and neither is 1)");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - shape.size();
  Shape dims;
  for (int64_t i = 0; i < grad.dim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && grad.size(i) != 1)) dims.push_back(i);
  Tensor summed = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return summed.reshape(shape);
}

namespace {

// a op b, after the one promotion PyTorch makes that matters here: an integer operand -- a uint8
// mask, int64 counts -- meets a floating one in the floating one's dtype (mask * x is x's dtype). Two
// floating operands must still agree: ringgrad never widens float32 to float64 behind your back.
Tensor binary_forward(kernels::BinaryOp op, const char* name, const Tensor& a_in, const Tensor& b_in) {
  ops::check_defined(name, a_in, "a");
  ops::check_defined(name, b_in, "b");
  const bool a_int = !is_floating(a_in.dtype()), b_int = !is_floating(b_in.dtype());
  const Tensor a = a_int && !b_int ? a_in.to(b_in.dtype()) : a_in;
  const Tensor b = b_int && !a_int ? b_in.to(a_in.dtype()) : b_in;
  ops::check_floating(name, a, "a");
  ops::check_floating(name, b, "b");
  ops::check_same(name, a, b);
  const Shape shape = a.shape() == b.shape() ? a.shape() : broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(shape, TensorOptions(a.dtype()).device(a.device()));
  if (out.numel() > 0)
    ops::backend_of(a, name).binary(op, a.dtype(), ops::broadcast_desc(a, shape), ops::broadcast_desc(b, shape),
                                    out.data(), ops::stream_of(out));
  return out;
}

struct AddBackward final : Node {
  Shape a_shape, b_shape;
  const char* name() const override { return "AddBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    return {sum_to(g[0], a_shape), sum_to(g[0], b_shape)};
  }
};

struct SubBackward final : Node {
  Shape a_shape, b_shape;
  const char* name() const override { return "SubBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    return {sum_to(g[0], a_shape), sum_to(neg(g[0]), b_shape)};
  }
};

struct MulBackward final : Node {
  Shape a_shape, b_shape;
  SavedTensor a, b;  // a is saved only when b needs a gradient, and b only when a does
  const char* name() const override { return "MulBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor& a0 = a.unpack();
    const Tensor& b0 = b.unpack();
    return {b0.defined() ? sum_to(g[0] * b0, a_shape) : Tensor(), a0.defined() ? sum_to(g[0] * a0, b_shape) : Tensor()};
  }
};

struct DivBackward final : Node {
  SavedTensor a, b;
  const char* name() const override { return "DivBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor& a0 = a.unpack();
    const Tensor& b0 = b.unpack();
    Tensor grad_b;
    if (needs_b) grad_b = sum_to(neg(g[0] * a0) / (b0 * b0), b0.shape());
    return {needs_a ? sum_to(g[0] / b0, a_shape) : Tensor(), grad_b};
  }
  Shape a_shape;
  bool needs_a = false, needs_b = false;
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(kernels::BinaryOp::Add, "add", a, b);
  if (needs_grad(a, b)) {
    auto& node = record<AddBackward>(out, {a, b});
    node.a_shape = a.shape();
    node.b_shape = b.shape();
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(kernels::BinaryOp::Sub, "sub", a, b);
  if (needs_grad(a, b)) {
    auto& node = record<SubBackward>(out, {a, b});
    node.a_shape = a.shape();
    node.b_shape = b.shape();
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(kernels::BinaryOp::Mul, "mul", a, b);
  if (needs_grad(a, b)) {
    auto& node = record<MulBackward>(out, {a, b});
    node.a_shape = a.shape();
    node.b_shape = b.shape();
    if (b.requires_grad()) node.a = save(a);
    if (a.requires_grad()) node.b = save(b);
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(kernels::BinaryOp::Div, "div", a, b);
  if (needs_grad(a, b)) {
    auto& node = record<DivBackward>(out, {a, b});
    node.a_shape = a.shape();
    node.needs_a = a.requires_grad();
    node.needs_b = b.requires_grad();
    node.b = save(b);
    if (node.needs_b) node.a = save(a);
  }
  return out;
}

}  // namespace ringgrad
