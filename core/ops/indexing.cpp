// core/ops/indexing.cpp: index_select, embedding, gather and scatter_add, forward and backward, on the
// kernels of kernels/indexing.h.
//
//   index_select  y = x[..., index[j], ...] along dim      dx = index_add of dy into zeros
//   embedding     y = weight[indices]  (rows)              dweight = index_add of dy (padding row: 0)
//   gather        y[.., j, ..] = x[.., index[.., j, ..], ..]   dx = scatter_add of dy into zeros
//   scatter_add   y = x; y[.., index[.., j, ..], ..] += src   dx = dy, dsrc = gather(dy)
//
// Indices are checked on the host before any kernel runs: a bad index is an Error naming the op, the
// value, the dimension and the position, never a wild read. Indices that live on a GPU are copied to
// the host for that, which waits for the GPU -- one synchronisation per call (PyTorch asserts on the
// device instead, and reports the error at some later call).
//
// Every backward add is deterministic (kernels/indexing.h): index_select's and embedding's group the
// positions by destination row on the host (a counting sort, stable) and hand the groups to index_add.
#include <optional>
#include <vector>

#include <ringgrad/kernels/indexing.h>
#include "core/ops/op_utils.h"

namespace ringgrad {
namespace {

using kernels::IndexingKernels;
using kernels::IndexLayout;

const IndexingKernels& indexing_of(const Tensor& t, const char* op) {
  return kernels::kernels_for<IndexingKernels>(t.device().kind, op);
}

// A dense tensor of `shape` seen as [outer, size, inner] around dimension `dim`.
IndexLayout layout_of(const Shape& shape, int64_t dim) {
  IndexLayout l;
  for (int64_t d = 0; d < shape.size(); ++d) {
    if (d < dim)
      l.outer *= shape[d];
    else if (d == dim)
      l.size = shape[d];
    else
      l.inner *= shape[d];
  }
  return l;
}

// An int64 index tensor on x's device, as every indexing op requires.
void check_index(const char* op, const Tensor& x, const Tensor& index, const char* x_name = "x") {
  ops::check_defined(op, index, "index");
  RINGGRAD_CHECK(index.dtype() == DType::i64, op, ": expected index of dtype int64, got ", index.dtype(),
                 "; convert with .to(DType::i64)");
  RINGGRAD_CHECK(index.device() == x.device(), op, ": expected index on ", x.device(), " (", x_name, "'s device), got ",
                 index.device());
}

// The indices as a dense host tensor, every value checked to lie in [0, size). `skip` (embedding's
// padding row) is a valid value too.
Tensor checked_host_indices(const char* op, const Tensor& index, int64_t size, int64_t dim) {
  Tensor host = index.device().is_cpu() ? index.contiguous() : index.to(Device::cpu());
  const int64_t* v = host.data<int64_t>();
  for (int64_t k = 0; k < host.numel(); ++k) {
    RINGGRAD_CHECK(v[k] >= 0 && v[k] < size, op, ": index ", v[k], " is out of range for dimension ", dim, " of size ",
                   size, " (at position ", k, " of the index)");
  }
  return host;
}

// Positions of a 1-D index grouped by the row they name, as index_add wants them (CSR): a stable
// counting sort, so each row's positions stay in increasing order. Positions whose row is `skip`
// are left out (they contribute nothing).
std::pair<Tensor, Tensor> group_by_row(const Tensor& host_index, int64_t rows, std::optional<int64_t> skip,
                                       Device device) {
  const int64_t* v = host_index.data<int64_t>();
  const int64_t n = host_index.numel();
  std::vector<int64_t> offsets(static_cast<size_t>(rows) + 1, 0);
  for (int64_t k = 0; k < n; ++k)
    if (v[k] != skip) ++offsets[static_cast<size_t>(v[k]) + 1];
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) offsets[r + 1] += offsets[r];
  std::vector<int64_t> order(static_cast<size_t>(offsets.back()));
  std::vector<int64_t> next(offsets.begin(), offsets.end() - 1);
  for (int64_t k = 0; k < n; ++k)
    if (v[k] != skip) order[static_cast<size_t>(next[static_cast<size_t>(v[k])]++)] = k;
  const Shape order_shape{static_cast<int64_t>(order.size())};
  return {from_vector(order, order_shape, device), from_vector(offsets, Shape{rows + 1}, device)};
}

// [index_select_backward]
// dx = zeros of x's shape, then dx[.., index[j], ..] += dy[.., j, ..] along dim (rows `skip` excluded).
struct IndexSelectBackward final : Node {
  Tensor host_index;  // checked, dense, on the host
  int64_t dim = 0;
  Shape x_shape;
  std::optional<int64_t> skip;
  const char* op = "index_select";
  const char* name() const override { return "IndexSelectBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor dy = g[0].contiguous();
    Tensor dx = zeros(x_shape, TensorOptions(dy.dtype()).device(dy.device()));
    if (dx.numel() == 0 || dy.numel() == 0) return {dx};
    const IndexLayout l = layout_of(x_shape, dim);
    const auto [order, offsets] = group_by_row(host_index, l.size, skip, dy.device());
    indexing_of(dy, op).index_add(dy.dtype(), dy.data(), host_index.numel(), ops::index_data(order),
                                  ops::index_data(offsets), dx.data(), l, ops::stream_of(dy));
    return {dx};
  }
};
// [/index_select_backward]

// index_select along an already wrapped dim, with the backward's padding row; `op` names messages.
Tensor select_rows(const char* op, const Tensor& x, int64_t dim, const Tensor& index, std::optional<int64_t> skip) {
  const Tensor host = checked_host_indices(op, index, x.shape()[dim], dim);
  const int64_t n = host.numel();
  Shape out_shape = x.shape();
  out_shape[dim] = n;
  Tensor y = empty(out_shape, TensorOptions(x.dtype()).device(x.device()));
  if (y.numel() > 0) {
    const Tensor xc = x.contiguous();
    const Tensor idx = x.device().is_cpu() ? host : index.contiguous();
    indexing_of(x, op).index_select(x.dtype(), xc.data(), layout_of(x.shape(), dim), ops::index_data(idx), n, y.data(),
                                    ops::stream_of(x));
  }
  if (needs_grad(x)) {
    auto& node = record<IndexSelectBackward>(y, {x});
    node.host_index = host;
    node.dim = dim;
    node.x_shape = x.shape();
    node.skip = skip;
    node.op = op;
  }
  return y;
}

// x narrowed to index's length in every dimension but `keep` (gather and scatter_add let the index be
// shorter than x, as PyTorch does); keep = -1 narrows every dimension.
Tensor narrow_to(const Tensor& x, const Tensor& index, int64_t keep) {
  Tensor v = x;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != keep && index.shape()[d] != x.shape()[d]) v = v.narrow(d, 0, index.shape()[d]);
  return v;
}

// Shapes gather and scatter_add accept: index has x's rank and is no longer than `x` in any dimension
// but dim (and, for scatter_add's src, in no dimension at all).
void check_index_shape(const char* op, const Tensor& x, const Tensor& index, int64_t dim, const char* x_name,
                       bool dim_too) {
  RINGGRAD_CHECK(index.dim() == x.dim(), op, ": expected index with ", x.dim(), " dimensions (as ", x_name,
                 "), got shape ", index.shape());
  for (int64_t d = 0; d < x.dim(); ++d) {
    RINGGRAD_CHECK((d == dim && !dim_too) || index.shape()[d] <= x.shape()[d], op, ": expected index.size(", d,
                   ") <= ", x_name, ".size(", d, ") = ", x.shape()[d], ", got index shape ", index.shape());
  }
}

struct GatherBackward final : Node {
  SavedTensor index;
  int64_t dim = 0;
  Shape x_shape;
  const char* name() const override { return "GatherBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor& dy = g[0];
    return {scatter_add(zeros(x_shape, TensorOptions(dy.dtype()).device(dy.device())), dim, index.unpack(), dy)};
  }
};

struct ScatterAddBackward final : Node {
  SavedTensor index;
  int64_t dim = 0;
  Shape src_shape;
  const char* name() const override { return "ScatterAddBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor& dy = g[0];
    const Tensor& idx = index.unpack();
    Tensor dsrc = gather(dy, dim, idx);
    if (dsrc.shape() != src_shape) {  // src was longer than index somewhere: those elements got no say
      Tensor padded = zeros(src_shape, TensorOptions(dy.dtype()).device(dy.device()));
      narrow_to(padded, idx, -1).copy_(dsrc);
      dsrc = padded;
    }
    return {dy, dsrc};
  }
};

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* op = "index_select";
  ops::check_defined(op, x, "x");
  check_index(op, x, index);
  RINGGRAD_CHECK(x.dim() >= 1, op, ": expected x with at least one dimension, got a 0-d tensor");
  RINGGRAD_CHECK(index.dim() <= 1, op, ": expected a 1-D index, got shape ", index.shape());
  return select_rows(op, x, ops::wrap_dim(dim, x.dim(), op), index, std::nullopt);
}

// [embedding]
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  const char* op = "embedding";
  ops::check_defined(op, weight, "weight");
  RINGGRAD_CHECK(weight.dim() == 2, op, ": expected a 2-D weight [num_embeddings, embedding_dim], got shape ",
                 weight.shape());
  check_index(op, weight, indices, "weight");
  const int64_t rows = weight.shape()[0];
  if (padding_idx) {
    RINGGRAD_CHECK(*padding_idx >= -rows && *padding_idx < rows, op, ": expected padding_idx in [", -rows, ", ",
                   rows - 1, "], got ", *padding_idx);
    if (*padding_idx < 0) padding_idx = *padding_idx + rows;
  }
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.shape()[1]);
  return select_rows(op, weight, 0, indices.reshape({indices.numel()}), padding_idx).view(out_shape);
}
// [/embedding]

Tensor gather(const Tensor& x, int64_t dim_in, const Tensor& index) {
  const char* op = "gather";
  ops::check_defined(op, x, "x");
  check_index(op, x, index);
  const int64_t dim = ops::wrap_dim(dim_in, x.dim(), op);
  check_index_shape(op, x, index, dim, "x", false);
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[dim];
  const Tensor host = checked_host_indices(op, index, size, dim);
  Tensor y = empty(index.shape(), TensorOptions(x.dtype()).device(x.device()));
  if (y.numel() > 0) {
    const Tensor xc = narrow_to(x, index, dim).contiguous();
    const Tensor idx = x.device().is_cpu() ? host : index.contiguous();
    const IndexLayout l = layout_of(xc.shape(), dim);
    indexing_of(x, op).gather(x.dtype(), xc.data(), l, ops::index_data(idx), index.dim() == 0 ? 1 : index.shape()[dim],
                              y.data(), ops::stream_of(x));
  }
  if (needs_grad(x)) {
    auto& node = record<GatherBackward>(y, {x});
    node.index = save(index);
    node.dim = dim;
    node.x_shape = x.shape();
  }
  return y;
}

Tensor scatter_add(const Tensor& x, int64_t dim_in, const Tensor& index, const Tensor& src) {
  const char* op = "scatter_add";
  ops::check_floating(op, x, "x");
  ops::check_defined(op, src, "src");
  ops::check_same(op, x, src, "x", "src");
  check_index(op, x, index);
  const int64_t dim = ops::wrap_dim(dim_in, x.dim(), op);
  check_index_shape(op, x, index, dim, "x", false);
  check_index_shape(op, src, index, dim, "src", true);
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[dim];
  const Tensor host = checked_host_indices(op, index, size, dim);
  Tensor y = x.detach().clone();
  if (index.numel() > 0) {
    NoGradGuard no_grad;
    const Tensor region = narrow_to(y, index, dim);  // a view of y
    const Tensor dense = region.is_contiguous() ? region : region.contiguous();
    const Tensor s = narrow_to(src, index, -1).contiguous();
    const Tensor idx = x.device().is_cpu() ? host : index.contiguous();
    indexing_of(x, op).scatter_add(x.dtype(), s.data(), ops::index_data(idx), index.dim() == 0 ? 1 : index.shape()[dim],
                                   dense.data(), layout_of(dense.shape(), dim), ops::stream_of(x));
    if (!region.is_contiguous()) region.copy_(dense);
  }
  if (needs_grad(x, src)) {
    auto& node = record<ScatterAddBackward>(y, {x, src});
    node.index = save(index);
    node.dim = dim;
    node.src_shape = src.shape();
  }
  return y;
}

}  // namespace ringgrad
