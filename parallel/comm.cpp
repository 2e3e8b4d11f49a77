// parallel/comm.cpp: scatter, gather and broadcast, each with its backward node.
//
// The three nodes are multi-output or multi-input: output i of Scatter and Broadcast lives on
// device i, and the engine hands apply() one gradient slot per output (undefined when that output
// received none -- e.g. a replica whose copy of a parameter was not used).
#include <ringgrad/parallel/comm.h>

#include <cstddef>
#include <set>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/autograd/node.h>
#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace parallel {
namespace {

using Clock = std::chrono::steady_clock;

int64_t normalize_dim(const char* op, int64_t dim, int64_t rank) {
  RINGGRAD_CHECK(rank > 0, op, ": expected a tensor with at least one dimension, got a 0-d tensor");
  RINGGRAD_CHECK(dim >= -rank && dim < rank, op, ": dim ", dim, " is out of range for a ", rank, "-d tensor");
  return dim < 0 ? dim + rank : dim;
}

// Makes outputs[i] the i-th output of `node`. (record() in node.h does this for one-output ops.)
void attach_outputs(const std::shared_ptr<Node>& node, const std::vector<Tensor>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    AutogradMeta& meta = outputs[i].autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<int>(i);
  }
}

// Concatenates `pieces` along `dim` into a new tensor of `shape` on `device`; an undefined piece
// counts as zeros. Each piece is copied once, straight into its slice.
Tensor join(const std::vector<Tensor>& pieces, const std::vector<int64_t>& sizes, const Shape& shape, DType dtype,
            Device device, int64_t dim) {
  bool all_defined = true;
  for (const Tensor& p : pieces) all_defined = all_defined && p.defined();
  Tensor out = all_defined ? empty(shape, TensorOptions(dtype).device(device))
                           : zeros(shape, TensorOptions(dtype).device(device));
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < pieces.size() && pieces[i].defined()) out.narrow(dim, offset, sizes[i]).copy_(pieces[i]);
    offset += sizes[i];
  }
  return out;
}

// Cuts `whole` along `dim` into `sizes` and puts piece i on devices[i] (a view where it stays).
std::vector<Tensor> cut(const Tensor& whole, const std::vector<int64_t>& sizes, const std::vector<Device>& devices,
                        int64_t dim) {
  NoGradGuard no_grad;
  std::vector<Tensor> pieces;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor piece = whole.narrow(dim, offset, sizes[i]);
    pieces.push_back(devices[i] == whole.device() ? piece : piece.to(devices[i]));
    offset += sizes[i];
  }
  return pieces;
}

// scatter's backward: the chunks' gradients, joined on the source device.
struct ScatterBackward final : Node {
  std::vector<int64_t> sizes;
  Shape input_shape;
  DType dtype = DType::f32;
  int64_t dim = 0;
  const char* name() const override { return "ScatterBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grads) override {
    return {join(grads, sizes, input_shape, dtype, device, dim)};
  }
};

// gather's backward: the output's gradient, cut into the inputs' sizes and sent back.
struct GatherBackward final : Node {
  std::vector<int64_t> sizes;
  std::vector<Device> devices;
  int64_t dim = 0;
  const char* name() const override { return "GatherBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return std::vector<Tensor>(sizes.size());
    return cut(grads[0], sizes, devices, dim);
  }
};

// broadcast's backward: d(loss)/dp = sum over devices of d(loss)/d(copy_i), summed on p's device.
struct BroadcastBackward final : Node {
  std::shared_ptr<ReduceClock> clock;
  const char* name() const override { return "BroadcastBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grads) override {
    const auto start = Clock::now();
    Tensor sum;
    for (const Tensor& g : grads) {
      if (!g.defined()) continue;
      const Tensor here = g.to(device);  // no copy for the source device's own replica
      sum = sum.defined() ? add(sum, here) : here;
    }
    if (clock) clock->add(Clock::now() - start);
    return {sum};
  }
};

}  // namespace

std::vector<int64_t> chunk_sizes(int64_t batch, int64_t devices) {
  RINGGRAD_CHECK(devices > 0, "scatter: expected at least one device, got ", devices);
  RINGGRAD_CHECK(batch > 0, "scatter: expected a non-empty batch, got ", batch, " rows");
  const int64_t chunks = std::min(batch, devices);
  std::vector<int64_t> sizes(static_cast<size_t>(chunks), batch / chunks);
  for (size_t i = 0; i < static_cast<size_t>(batch % chunks); ++i) ++sizes[i];
  return sizes;
}

std::vector<Tensor> scatter(const Tensor& x, const std::vector<Device>& devices, int64_t dim) {
  RINGGRAD_CHECK(x.defined(), "scatter: expected a defined tensor, got an undefined one");
  dim = normalize_dim("scatter", dim, x.dim());
  RINGGRAD_CHECK(x.size(dim) > 0, "scatter: expected a non-empty batch along dim ", dim, ", got shape ", x.shape());
  RINGGRAD_CHECK(!devices.empty(), "scatter: expected at least one device, got an empty list");
  for (Device d : devices) check_device(d, "scatter");
  const std::vector<int64_t> sizes = chunk_sizes(x.size(dim), static_cast<int64_t>(devices.size()));
  const std::vector<Device> used(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(sizes.size()));
  std::vector<Tensor> chunks = cut(x, sizes, used, dim);
  if (needs_grad(x)) {
    auto node = std::make_shared<ScatterBackward>();
    node->next_edges = {gradient_edge(x)};
    node->device = x.device();
    node->sizes = sizes;
    node->input_shape = x.shape();
    node->dtype = x.dtype();
    node->dim = dim;
    attach_outputs(node, chunks);
  }
  return chunks;
}

Tensor gather(const std::vector<Tensor>& outputs, Device device, int64_t dim) {
  RINGGRAD_CHECK(!outputs.empty(), "gather: expected at least one tensor, got an empty list");
  check_device(device, "gather");
  for (size_t i = 0; i < outputs.size(); ++i)
    RINGGRAD_CHECK(outputs[i].defined(), "gather: expected defined tensors, got an undefined one at index ", i);
  const Tensor& first = outputs[0];
  dim = normalize_dim("gather", dim, first.dim());
  Shape shape = first.shape();
  shape[dim] = 0;
  std::vector<int64_t> sizes;
  std::vector<Device> devices;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    bool same_shape = t.dim() == first.dim();
    for (int64_t d = 0; same_shape && d < t.dim(); ++d) same_shape = d == dim || t.size(d) == first.size(d);
    RINGGRAD_CHECK(same_shape, "gather: expected every tensor to have shape ", first.shape(), " except along dim ", dim,
                   ", got ", t.shape(), " at index ", i, " (on ", t.device(), ")");
    RINGGRAD_CHECK(t.dtype() == first.dtype(), "gather: expected every tensor to be ", first.dtype(), ", got ",
                   t.dtype(), " at index ", i, " (on ", t.device(), ")");
    sizes.push_back(t.size(dim));
    devices.push_back(t.device());
    shape[dim] += t.size(dim);
  }
  Tensor out = join(outputs, sizes, shape, first.dtype(), device, dim);
  if (needs_grad(outputs)) {
    auto& node = record<GatherBackward>(out, outputs);
    node.sizes = sizes;
    node.devices = devices;
    node.dim = dim;
  }
  return out;
}

void ReduceClock::add(std::chrono::nanoseconds elapsed) {
  std::lock_guard<std::mutex> lock(mutex_);
  total_ += elapsed;
}

std::chrono::nanoseconds ReduceClock::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::chrono::nanoseconds total = total_;
  total_ = std::chrono::nanoseconds{0};
  return total;
}

std::vector<Tensor> broadcast(const Tensor& p, const std::vector<Device>& devices, std::shared_ptr<ReduceClock> clock) {
  RINGGRAD_CHECK(p.defined(), "broadcast: expected a defined tensor, got an undefined one");
  RINGGRAD_CHECK(!devices.empty(), "broadcast: expected at least one device, got an empty list");
  std::set<Device> distinct(devices.begin(), devices.end());
  RINGGRAD_CHECK(distinct.size() == devices.size(), "broadcast: expected distinct devices, got a device twice");
  RINGGRAD_CHECK(distinct.count(p.device()) == 1,
                 "broadcast: expected the tensor on one of the target devices, "
                 "got one on ",
                 p.device());
  for (Device d : devices) check_device(d, "broadcast");
  std::vector<Tensor> copies;
  {
    NoGradGuard no_grad;
    for (Device d : devices) copies.push_back(d == p.device() ? p.detach() : p.detach().to(d));
  }
  if (needs_grad(p)) {
    auto node = std::make_shared<BroadcastBackward>();
    node->next_edges = {gradient_edge(p)};
    node->device = p.device();
    node->clock = std::move(clock);
    attach_outputs(node, copies);
  }
  return copies;
}

}  // namespace parallel
}  // namespace ringgrad
