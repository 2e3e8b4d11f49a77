// core/ops/compare.cpp: comparisons (eq, ne, lt, le, gt, ge), where, masked_fill, tril and triu, on
// the kernels of kernels/compare.h.
//
//   eq ... ge       mask = a op b (uint8 0/1, broadcasting)           not differentiable
//   where           y = cond ? a : b (broadcasting)                    da = dy where cond, db = dy elsewhere
//   masked_fill     y = mask ? value : x                              dx = dy where the mask is 0
//   tril / triu     y = x on and below (above) the diagonal, else 0    dx = tril(dy) / triu(dy)
//
// Operands of different dtypes meet in promote_types(a, b) (core/base/dtype.h), as in PyTorch; a
// Python-style scalar takes the tensor's dtype, unless the tensor is integer and its dtype cannot hold
// the scalar (x_int < 0.5, or mask_u8 > -1, compare in float64).
#include <cmath>

#include <ringgrad/kernels/compare.h>
#include "core/ops/op_utils.h"

namespace ringgrad {
namespace {

using kernels::CompareKernels;
using kernels::CompareOp;

const CompareKernels& compare_of(const Tensor& t, const char* op) {
  return kernels::kernels_for<CompareKernels>(t.device().kind, op);
}

// Whether an integer dtype holds `value` exactly: a whole number within its range.
bool holds(DType dt, double value) {
  if (!std::isfinite(value) || value != std::trunc(value)) return false;
  if (dt == DType::u8) return value >= 0 && value <= 255;
  return value >= -9223372036854775808.0 && value < 9223372036854775808.0;  // int64
}

// A 0-d tensor holding `value` on t's device, in t's dtype -- or in float64 when t is integer and
// its dtype cannot hold the value (0.5, -1 or 300 against uint8), which a cast would change.
Tensor scalar_like(const Tensor& t, double value) {
  const DType dt = is_floating(t.dtype()) || holds(t.dtype(), value) ? t.dtype() : DType::f64;
  return scalar_tensor(value, TensorOptions(dt).device(t.device()));
}

// a and b in their promoted dtype, checked to be defined and on one device.
std::pair<Tensor, Tensor> promoted(const char* op, const Tensor& a, const Tensor& b, const char* a_name,
                                   const char* b_name) {
  ops::check_defined(op, a, a_name);
  ops::check_defined(op, b, b_name);
  RINGGRAD_CHECK(a.device() == b.device(), op, ": expected ", b_name, " on ", a.device(), " (", a_name,
                 "'s device), got ", b.device());
  const DType dt = promote_types(a.dtype(), b.dtype());
  return {a.to(dt), b.to(dt)};
}

Tensor compare(CompareOp op, const char* name, const Tensor& a_in, const Tensor& b_in) {
  const auto [a, b] = promoted(name, a_in, b_in, "a", "b");
  const Shape shape = a.shape() == b.shape() ? a.shape() : broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(shape, TensorOptions(DType::u8).device(a.device()));
  if (out.numel() > 0)
    compare_of(a, name).compare(op, a.dtype(), ops::broadcast_desc(a, shape), ops::broadcast_desc(b, shape),
                                static_cast<uint8_t*>(out.data()), ops::stream_of(a));
  return out;  // never recorded: a comparison has no gradient
}

void check_mask(const char* op, const Tensor& mask, const char* name) {
  ops::check_defined(op, mask, name);
  RINGGRAD_CHECK(mask.dtype() == DType::u8, op, ": expected ", name,
                 " of dtype uint8 (a mask, as comparisons return), got ", mask.dtype(),
                 "; make one with a comparison, e.g. ne(t, 0.0)");
}

// dy where the mask says `keep_where`, 0 elsewhere, summed back to `shape`.
Tensor masked_grad(const Tensor& dy, const Tensor& mask, bool keep_where, const Shape& shape) {
  const Tensor zero = scalar_tensor(0.0, TensorOptions(dy.dtype()).device(dy.device()));
  return sum_to(keep_where ? where(mask, dy, zero) : where(mask, zero, dy), shape);
}

struct WhereBackward final : Node {
  SavedTensor cond;
  Shape a_shape, b_shape;
  const char* name() const override { return "WhereBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor& c = cond.unpack();
    return {masked_grad(g[0], c, true, a_shape), masked_grad(g[0], c, false, b_shape)};
  }
};

// One tensor's triangle; `upper` picks triu.
struct TriangleBackward final : Node {
  int64_t diagonal = 0;
  bool upper = false;
  const char* name() const override { return upper ? "TriuBackward" : "TrilBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    return {upper ? triu(g[0], diagonal) : tril(g[0], diagonal)};
  }
};

Tensor triangle(const char* name, const Tensor& x, int64_t diagonal, bool upper) {
  ops::check_defined(name, x, "x");
  RINGGRAD_CHECK(x.dim() >= 2, name,
                 ": expected a tensor of at least 2 dimensions (a matrix or a batch of them), got shape ", x.shape());
  const Tensor xc = x.contiguous();
  Tensor y = empty_like(xc);
  const int64_t rows = x.shape()[x.dim() - 2], cols = x.shape()[x.dim() - 1];
  if (y.numel() > 0)
    compare_of(x, name).triangle(x.dtype(), xc.data(), y.data(), y.numel() / (rows * cols), rows, cols, diagonal, upper,
                                 ops::stream_of(x));
  if (needs_grad(x)) {
    auto& node = record<TriangleBackward>(y, {x});
    node.diagonal = diagonal;
    node.upper = upper;
  }
  return y;
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare(CompareOp::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(CompareOp::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(CompareOp::Lt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(CompareOp::Le, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(CompareOp::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(CompareOp::Ge, "ge", a, b); }
Tensor eq(const Tensor& x, double value) { return eq(x, scalar_like(x, value)); }
Tensor ne(const Tensor& x, double value) { return ne(x, scalar_like(x, value)); }
Tensor lt(const Tensor& x, double value) { return lt(x, scalar_like(x, value)); }
Tensor le(const Tensor& x, double value) { return le(x, scalar_like(x, value)); }
Tensor gt(const Tensor& x, double value) { return gt(x, scalar_like(x, value)); }
Tensor ge(const Tensor& x, double value) { return ge(x, scalar_like(x, value)); }

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  const char* name = "where";
  check_mask(name, cond, "condition");
  const auto [a, b] = promoted(name, a_in, b_in, "a", "b");
  RINGGRAD_CHECK(cond.device() == a.device(), name, ": expected condition on ", a.device(), " (a's device), got ",
                 cond.device());
  const Shape shape = broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), name), name);
  Tensor out = empty(shape, TensorOptions(a.dtype()).device(a.device()));
  if (out.numel() > 0)
    compare_of(a, name).where(a.dtype(), ops::broadcast_desc(cond, shape), ops::broadcast_desc(a, shape),
                              ops::broadcast_desc(b, shape), out.data(), ops::stream_of(a));
  if (needs_grad(a, b)) {
    auto& node = record<WhereBackward>(out, {a, b});
    node.cond = save(cond);
    node.a_shape = a.shape();
    node.b_shape = b.shape();
  }
  return out;
}
Tensor where(const Tensor& cond, const Tensor& a, double b) { return where(cond, a, scalar_like(a, b)); }
Tensor where(const Tensor& cond, double a, const Tensor& b) { return where(cond, scalar_like(b, a), b); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  const char* name = "masked_fill";
  ops::check_defined(name, x, "x");
  check_mask(name, mask, "mask");
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), name);
  RINGGRAD_CHECK(shape == x.shape(), name, ": expected a mask that broadcasts to x's shape ", x.shape(), ", got ",
                 mask.shape());
  RINGGRAD_CHECK(is_floating(x.dtype()) || holds(x.dtype(), value), name, ": the value ", value,
                 " cannot be stored in x's dtype ", x.dtype());
  // The value takes x's dtype, whatever it is (PyTorch casts it the same way): -inf fills float32.
  return where(mask, scalar_tensor(value, TensorOptions(x.dtype()).device(x.device())), x);
}

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle("tril", x, diagonal, false); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle("triu", x, diagonal, true); }

}  // namespace ringgrad
