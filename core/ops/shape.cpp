// core/ops/shape.cpp: cat, stack, split and chunk.
//
// cat copies each input into its slice of one new tensor; its backward hands each input the
// matching slice of the gradient (a view). split and chunk are narrow views, so they copy nothing.
#include "core/ops/op_utils.h"

namespace ringgrad {
namespace {

struct CatBackward final : Node {
  int64_t dim = 0;
  std::vector<int64_t> sizes;  // each input's size along dim
  const char* name() const override { return "CatBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    std::vector<Tensor> grads;
    int64_t start = 0;
    for (int64_t size : sizes) {
      grads.push_back(g[0].narrow(dim, start, size));
      start += size;
    }
    return grads;
  }
};

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim_in) {
  RINGGRAD_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  ops::check_defined("cat", first, "tensors[0]");
  RINGGRAD_CHECK(first.dim() > 0, "cat: expected tensors with at least 1 dim, got a 0-d tensor");
  const int64_t dim = ops::wrap_dim(dim_in, first.dim(), "cat");
  Shape shape = first.shape();
  shape[dim] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    ops::check_defined("cat", t, "every tensor");
    ops::check_same("cat", first, t, "tensors[0]", "every tensor");
    bool match = t.dim() == first.dim();
    for (int64_t d = 0; match && d < t.dim(); ++d) match = d == dim || t.size(d) == first.size(d);
    RINGGRAD_CHECK(match, "cat: expected every tensor to match ", first.shape(), " except in dim ", dim,
                   ", got tensors[", i, "] of shape ", t.shape());
    shape[dim] += t.size(dim);
  }
  Tensor out = empty(shape, TensorOptions(first.dtype()).device(first.device()));
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    Tensor region = out.narrow(dim, start, t.size(dim));
    if (t.numel() > 0)
      ops::backend_of(t, "cat").copy(t.dtype(), ops::desc_of(t), region.dtype(), ops::desc_of(region),
                                     ops::stream_of(out));
    start += t.size(dim);
  }
  if (needs_grad(tensors)) {
    auto& node = record<CatBackward>(out, tensors);
    node.dim = dim;
    for (const Tensor& t : tensors) node.sizes.push_back(t.size(dim));
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  RINGGRAD_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const int64_t d = ops::wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ops::check_defined("stack", tensors[i], "every tensor");
    ops::check_same("stack", tensors[0], tensors[i], "tensors[0]", "every tensor");
    RINGGRAD_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: expected every tensor to have shape ",
                   tensors[0].shape(), ", got tensors[", i, "] of shape ", tensors[i].shape());
    expanded.push_back(tensors[i].unsqueeze(d));
  }
  return cat(expanded, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim_in) {
  const int64_t dim = ops::wrap_dim(dim_in, x.dim(), "split");
  RINGGRAD_CHECK(split_size > 0, "split: expected a positive split_size, got ", split_size);
  std::vector<Tensor> pieces;
  const int64_t n = x.size(dim);
  for (int64_t start = 0; start < n || (n == 0 && pieces.empty()); start += split_size)
    pieces.push_back(x.narrow(dim, start, std::min(split_size, n - start)));
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  RINGGRAD_CHECK(chunks > 0, "chunk: expected a positive number of chunks, got ", chunks);
  const int64_t n = x.size(ops::wrap_dim(dim, x.dim(), "chunk"));
  // As in PyTorch: pieces of ceil(n / chunks), so there may be fewer than `chunks` pieces.
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, 1), dim);
}

}  // namespace ringgrad
