// core/ops/reduce.cpp: sum, mean, max and argmax.
//
// The kernels reduce the middle axis of a dense [outer, r, inner] array. Reducing a set of dims
// becomes that shape directly when the dims are adjacent (sum over dim 1 of [4, 5, 6] is
// [4, 5, 6] -> outer 4, r 5, inner 6); otherwise the reduced dims are first permuted to the end.
//   d sum / dx = 1 for every element: the gradient is broadcast back (expand, no copy).
//   d max / dx = 1 at the first maximum, 0 elsewhere: the gradient is scattered to those indices.
#include <algorithm>
#include <cmath>

#include "core/ops/op_utils.h"

namespace ringgrad {
namespace {

struct SumBackward final : Node {
  Shape input_shape;
  Shape dims;  // sorted, reduced dims
  bool keepdim = false;
  const char* name() const override { return "SumBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    Tensor grad = g[0];
    if (!keepdim)
      for (int64_t d : dims) grad = grad.unsqueeze(d);  // ascending, so each index is already final
    return {grad.expand(input_shape)};
  }
};

struct MaxBackward final : Node {
  Shape input_shape;
  SavedTensor indices;  // int64, keepdim-shaped like the gradient this node receives
  int64_t dim = 0;
  const char* name() const override { return "MaxBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor grad = g[0].contiguous();
    Tensor grad_input = zeros(input_shape, TensorOptions(grad.dtype()).device(grad.device()));
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < dim; ++i) outer *= input_shape[i];
    for (int64_t i = dim + 1; i < input_shape.size(); ++i) inner *= input_shape[i];
    if (grad.numel() > 0)
      ops::backend_of(grad, "max backward")
          .scatter_add_dim(grad.dtype(), grad.data(), ops::index_data(indices.unpack()), grad_input.data(), outer,
                           input_shape[dim], inner, ops::stream_of(grad));
    return {grad_input};
  }
};

Shape normalize_dims(const Shape& dims, int64_t ndim, const char* op) {
  Shape out;
  if (dims.empty()) {  // as in PyTorch, an empty list of dims reduces over all of them
    for (int64_t i = 0; i < ndim; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) {
    const int64_t w = ops::wrap_dim(d, ndim, op);
    RINGGRAD_CHECK(std::find(out.begin(), out.end(), w) == out.end(), op, ": dim ", d, " appears twice in ", dims);
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims_in, bool keepdim) {
  ops::check_floating("sum", x);
  const Shape dims = x.dim() == 0 ? Shape{} : normalize_dims(dims_in, x.dim(), "sum");
  Shape out_shape, kept;
  for (int64_t i = 0; i < x.dim(); ++i) {
    const bool reduced = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced) kept.push_back(i);
    if (!reduced)
      out_shape.push_back(x.size(i));
    else if (keepdim)
      out_shape.push_back(1);
  }
  // Adjacent reduced dims on a dense tensor need no reordering; otherwise move them last.
  const bool adjacent = dims.empty() || dims.back() - dims[0] + 1 == dims.size();
  Tensor src = x;
  int64_t outer = 1, r = 1, inner = 1;
  if (adjacent && x.is_contiguous()) {
    for (int64_t i = 0; i < x.dim(); ++i) {
      if (i < dims[0])
        outer *= x.size(i);
      else if (i > dims.back())
        inner *= x.size(i);
      else
        r *= x.size(i);
    }
  } else {
    Shape order = kept;
    for (int64_t d : dims) order.push_back(d);
    src = x.detach().permute(order).contiguous();
    for (int64_t d : kept) outer *= x.size(d);
    for (int64_t d : dims) r *= x.size(d);
  }
  Tensor out = empty(out_shape, TensorOptions(x.dtype()).device(x.device()));
  if (out.numel() > 0)
    ops::backend_of(x, "sum").reduce(kernels::ReduceOp::Sum, x.dtype(), src.data(), out.data(), nullptr, outer, r,
                                     inner, ops::stream_of(x));
  if (needs_grad(x)) {
    auto& node = record<SumBackward>(out, {x});
    node.input_shape = x.shape();
    node.dims = dims;
    node.keepdim = keepdim;
  }
  return out;
}

Tensor sum(const Tensor& x) { return sum(x, Shape{}, false); }

Tensor mean(const Tensor& x, const Shape& dims_in, bool keepdim) {
  ops::check_floating("mean", x);
  const Shape dims = x.dim() == 0 ? Shape{} : normalize_dims(dims_in, x.dim(), "mean");
  int64_t count = 1;
  for (int64_t d : dims) count *= x.size(d);
  // An empty reduction has mean NaN, as in PyTorch (0 / 0).
  return sum(x, dims, keepdim) * (count == 0 ? NAN : 1.0 / static_cast<double>(count));
}

Tensor mean(const Tensor& x) { return mean(x, Shape{}, false); }

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim_in, bool keepdim) {
  ops::check_floating("max", x);
  const Tensor xc = x.dim() == 0 ? x.reshape({1}) : x.contiguous();
  const int64_t dim = ops::wrap_dim(dim_in, xc.dim(), "max");
  RINGGRAD_CHECK(xc.size(dim) > 0, "max: expected a non-empty dimension ", dim_in, ", got shape ", x.shape());
  int64_t outer = 1, inner = 1;
  Shape keep_shape = xc.shape();
  keep_shape[dim] = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= xc.size(i);
  for (int64_t i = dim + 1; i < xc.dim(); ++i) inner *= xc.size(i);
  Tensor values = empty(keep_shape, TensorOptions(x.dtype()).device(x.device()));
  Tensor indices = empty(keep_shape, TensorOptions(DType::i64).device(x.device()));
  if (values.numel() > 0)
    ops::backend_of(x, "max").reduce(kernels::ReduceOp::Max, x.dtype(), xc.data(), values.data(),
                                     static_cast<int64_t*>(indices.data()), outer, xc.size(dim), inner,
                                     ops::stream_of(x));
  if (needs_grad(x)) {
    auto& node = record<MaxBackward>(values, {xc});
    node.input_shape = xc.shape();
    node.indices = save(indices);
    node.dim = dim;  // values are still keepdim-shaped here; squeezing them below is a view op
  }
  if (!keepdim || x.dim() == 0) {
    values = x.dim() == 0 ? values.reshape({}) : values.squeeze(dim);
    indices = x.dim() == 0 ? indices.reshape({}) : indices.squeeze(dim);
  }
  return {values, indices};
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  return max(x, dim, keepdim).second;
}

}  // namespace ringgrad
