// core/ops/views.cpp: ops that return a view -- a new shape/strides/offset over the same storage.
//
// No data moves in the forward. The backward of each view maps the view's gradient back to the
// base's shape: reshape reshapes back, transpose transposes back, narrow/select place the gradient
// into a zero tensor of the base's shape, expand sums over the expanded dimensions.
#include <algorithm>
#include <numeric>

#include "core/ops/op_utils.h"

namespace ringgrad {
namespace ops {

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->device = base.device();
  impl->storage = base.storage();
  return Tensor(std::move(impl));
}

}  // namespace ops

namespace {

// reshape, view, flatten, squeeze, unsqueeze: the gradient is reshaped back to the input's shape.
struct ViewBackward final : Node {
  Shape input_shape;
  const char* name() const override { return "ViewBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override { return {g[0].reshape(input_shape)}; }
};

// transpose and permute: the gradient is permuted by the inverse permutation.
struct PermuteBackward final : Node {
  Shape inverse;
  const char* name() const override { return "PermuteBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override { return {g[0].permute(inverse)}; }
};

// narrow and slice (dim, start, step): the gradient fills that region of a zero tensor.
struct SliceBackward final : Node {
  Shape input_shape;
  int64_t dim = 0, start = 0, step = 1;
  const char* name() const override { return "SliceBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    Tensor grad_input = zeros(input_shape, TensorOptions(g[0].dtype()).device(g[0].device()));
    if (g[0].numel() == 0) return {grad_input};  // an empty slice took nothing, so gives nothing back
    const int64_t end = start + (g[0].size(dim) - 1) * step + 1;
    Tensor region = grad_input.slice(dim, start, end, step);
    kernels::backend_for(region.device().kind, "slice backward")
        .copy(g[0].dtype(), ops::desc_of(g[0]), region.dtype(), ops::desc_of(region), ops::stream_of(region));
    return {grad_input};
  }
};

// expand: every copy of an element contributed, so the gradient sums over the expanded dims.
struct ExpandBackward final : Node {
  Shape input_shape;
  const char* name() const override { return "ExpandBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override { return {sum_to(g[0], input_shape)}; }
};

Tensor record_view(const Tensor& input, Tensor output) {
  if (needs_grad(input)) record<ViewBackward>(output, {input}).input_shape = input.shape();
  return output;
}

// Replaces one -1 in `shape` by the size that makes the element count match `numel`.
Shape infer_size(const Shape& requested, int64_t numel, const char* op, const Shape& from) {
  Shape shape = requested;
  int64_t known = 1, infer_at = -1;
  for (int64_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      RINGGRAD_CHECK(infer_at < 0, op, ": only one size may be -1, got ", requested);
      infer_at = i;
    } else {
      RINGGRAD_CHECK(shape[i] >= 0, op, ": expected non-negative sizes, got ", requested);
      RINGGRAD_CHECK(!__builtin_mul_overflow(known, shape[i], &known), op, ": the sizes ", requested,
                     " multiply to more than int64 can hold");
    }
  }
  if (infer_at >= 0) {
    RINGGRAD_CHECK(known != 0 && numel % known == 0, op, ": shape ", requested, " is invalid for input of shape ", from,
                   " (", numel, " elements)");
    shape[infer_at] = numel / known;
  }
  RINGGRAD_CHECK(shape.numel() == numel, op, ": shape ", requested, " is invalid for input of shape ", from, " (",
                 numel, " elements)");
  return shape;
}

// The strides that let a tensor of `shape` and `strides` be seen with `wanted` sizes without moving
// an element, as PyTorch's view() computes them; false when there are none. Walking the old dims
// from the last, a run of dims that lie one after another in memory (each stride the next one's
// stride times its size) is a "chunk" that any new dims may split or merge as long as they exactly
// cover it; a view that would have to cross from one chunk into the next is impossible. So a
// transposed matrix can be split along its leading dim but not flattened.
bool view_strides(const Shape& shape, const Shape& strides, const Shape& wanted, Shape* out) {
  Shape result(std::vector<int64_t>(static_cast<size_t>(wanted.size()), 1));
  if (shape.empty()) {  // a scalar: every wanted size is 1
    *out = result;
    return true;
  }
  int64_t numel = 1;
  for (const int64_t d : shape) numel *= d;
  if (numel == 0) {  // nothing to move: any strides do, so take the dense ones
    *out = contiguous_strides(wanted);
    return true;
  }
  int64_t view_d = wanted.size() - 1;
  int64_t chunk_stride = strides.back();  // the stride of the chunk's innermost element
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = shape.size() - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    // The chunk ends at d when the dim before it does not continue it in memory.
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || wanted[view_d] == 1)) {
        result[view_d] = view_numel * chunk_stride;
        view_numel *= wanted[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return false;
  *out = result;
  return true;
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  const Shape shape = infer_size(requested, numel(), "view", this->shape());
  Shape view_stride;
  RINGGRAD_CHECK(view_strides(this->shape(), strides(), shape, &view_stride), "view: shape ", this->shape(),
                 " with strides ", strides(), " cannot be seen as ", shape,
                 " without moving elements (a new dim would span two separate runs of memory); use reshape(), "
                 "which copies when it must");
  return record_view(*this, ops::make_view(*this, shape, view_stride, offset()));
}

Tensor Tensor::reshape(const Shape& requested) const {
  const Shape shape = infer_size(requested, numel(), "reshape", this->shape());
  if (shape == this->shape()) return *this;
  Shape view_stride;
  return view_strides(this->shape(), strides(), shape, &view_stride) ? view(shape) : contiguous().view(shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t start = ops::wrap_dim(start_dim, dim(), "flatten");
  const int64_t end = ops::wrap_dim(end_dim, dim(), "flatten");
  RINGGRAD_CHECK(start <= end, "flatten: expected start_dim <= end_dim, got ", start_dim, " and ", end_dim);
  Shape shape;
  for (int64_t i = 0; i < start; ++i) shape.push_back(size(i));
  int64_t merged = 1;
  for (int64_t i = start; i <= end; ++i) merged *= size(i);
  shape.push_back(merged);
  for (int64_t i = end + 1; i < dim(); ++i) shape.push_back(size(i));
  return reshape(shape);
}

Tensor Tensor::permute(const Shape& dims) const {
  RINGGRAD_CHECK(dims.size() == dim(), "permute: expected ", dim(), " dims, got ", dims);
  Shape shape, strides, inverse = dims, seen(Shape(std::vector<int64_t>(static_cast<size_t>(dim()), 0)));
  for (int64_t i = 0; i < dim(); ++i) {
    const int64_t d = ops::wrap_dim(dims[i], dim(), "permute");
    RINGGRAD_CHECK(!seen[d], "permute: expected a permutation of 0..", dim() - 1, ", got ", dims);
    seen[d] = 1;
    shape.push_back(size(d));
    strides.push_back(stride(d));
    inverse[d] = i;
  }
  Tensor out = ops::make_view(*this, shape, strides, offset());
  if (needs_grad(*this)) record<PermuteBackward>(out, {*this}).inverse = inverse;
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  Shape dims;
  for (int64_t i = 0; i < dim(); ++i) dims.push_back(i);
  if (dim() == 0) return *this;
  std::swap(dims[ops::wrap_dim(dim0, dim(), "transpose")], dims[ops::wrap_dim(dim1, dim(), "transpose")]);
  return permute(dims);
}

Tensor Tensor::t() const {
  RINGGRAD_CHECK(dim() <= 2, "t: expected a tensor with at most 2 dims, got shape ", shape());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  const int64_t d = ops::wrap_dim(dim_, dim(), "slice");
  RINGGRAD_CHECK(dim() > 0, "slice: expected a tensor with at least 1 dim, got a 0-d tensor");
  RINGGRAD_CHECK(step > 0, "slice: expected a positive step, got ", step);
  const int64_t n = size(d);
  // Python-style bounds: negatives count from the end, out-of-range values are clamped.
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = this->shape(), strides = this->strides();
  shape[d] = end == start ? 0 : 1 + (end - start - 1) / step;  // no overflow for any step
  if (shape[d] <= 1) {
    // The step never moves: keep the stride (a huge step must not overflow it).
  } else {
    RINGGRAD_CHECK(!__builtin_mul_overflow(strides[d], step, &strides[d]), "slice: step ", step, " is too large");
  }
  Tensor out = ops::make_view(*this, shape, strides, offset() + start * stride(d));
  if (needs_grad(*this)) {
    auto& node = record<SliceBackward>(out, {*this});
    node.input_shape = this->shape();
    node.dim = d;
    node.start = start;
    node.step = step;
  }
  return out;
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  const int64_t d = ops::wrap_dim(dim_, dim(), "narrow");
  RINGGRAD_CHECK(start >= 0 && length >= 0 && start + length <= size(d),
                 "narrow: expected start >= 0 and start + "
                 "length <= ",
                 size(d), " (size of dim ", d, "), got start ", start, " and length ", length);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  const int64_t d = ops::wrap_dim(dim_, dim(), "select");
  const int64_t n = size(d);
  RINGGRAD_CHECK(index >= -n && index < n, "select: expected index in [", -n, ", ", n - 1, "] for dim ", d,
                 " of shape ", shape(), ", got ", index);
  if (index < 0) index += n;
  return narrow(d, index, 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& requested) const {
  RINGGRAD_CHECK(requested.size() >= dim(), "expand: expected at least ", dim(), " sizes for shape ", shape(), ", got ",
                 requested);
  const int64_t lead = requested.size() - dim();
  Shape shape = requested, strides = requested;
  for (int64_t i = 0; i < requested.size(); ++i) {
    const bool new_dim = i < lead;
    const int64_t have = new_dim ? 1 : size(i - lead);
    int64_t want = requested[i];
    if (want == -1) {
      RINGGRAD_CHECK(!new_dim, "expand: -1 is not allowed for a new leading dimension, got ", requested);
      want = have;
    }
    RINGGRAD_CHECK(want >= 0, "expand: expected sizes >= 0 (or -1 to keep one), got ", requested);
    RINGGRAD_CHECK(have == want || have == 1, "expand: the size ", have, " of shape ", this->shape(), " must match ",
                   want, " in ", requested, " unless it is 1");
    shape[i] = want;
    strides[i] = new_dim ? 0 : (have == want ? stride(i - lead) : 0);  // stride 0 repeats the element
  }
  if (shape == this->shape()) return *this;
  Tensor out = ops::make_view(*this, shape, strides, offset());
  if (needs_grad(*this)) record<ExpandBackward>(out, {*this}).input_shape = this->shape();
  return out;
}

Tensor Tensor::squeeze() const {
  Shape shape, strides;
  for (int64_t i = 0; i < dim(); ++i)
    if (size(i) != 1) {
      shape.push_back(size(i));
      strides.push_back(stride(i));
    }
  return record_view(*this, ops::make_view(*this, shape, strides, offset()));
}

Tensor Tensor::squeeze(int64_t dim_) const {
  if (dim() == 0) return *this;
  const int64_t d = ops::wrap_dim(dim_, dim(), "squeeze");
  if (size(d) != 1) return *this;  // as in PyTorch: squeezing a dimension that is not 1 is a no-op
  Shape shape = this->shape(), strides = this->strides();
  shape.erase(d);
  strides.erase(d);
  return record_view(*this, ops::make_view(*this, shape, strides, offset()));
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  const int64_t d = ops::wrap_dim(dim_, dim() + 1, "unsqueeze");
  Shape shape = this->shape(), strides = this->strides();
  const int64_t stride_here = d < dim() ? size(d) * stride(d) : 1;
  shape.insert(d, 1);
  strides.insert(d, stride_here);
  return record_view(*this, ops::make_view(*this, shape, strides, offset()));
}

}  // namespace ringgrad
