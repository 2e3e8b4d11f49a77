// core/ops/copy.cpp: contiguous, clone and to(device | dtype) -- the ops that copy data.
//
// All of them go through the backend's strided copy, which gathers any view into dense memory and
// converts the dtype on the way. Their backwards copy the gradient back (to the source device, to
// the source dtype) or pass it through unchanged.
#include "core/ops/op_utils.h"

#include <cstdint>
#include <utility>

namespace ringgrad {
namespace {

// contiguous and clone: same values, so the gradient passes through.
struct CloneBackward final : Node {
  const char* name() const override { return "CloneBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override { return {g[0]}; }
};

// to(device, dtype): the gradient goes back to where the input lived, in the input's dtype.
struct ToBackward final : Node {
  Device source_device;
  DType source_dtype = DType::f32;
  const char* name() const override { return "ToBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override { return {g[0].to(source_device, source_dtype)}; }
};

// A dense copy of src on `device` with `dtype`, no autograd.
//
// On one device (or between logical CPU devices, which share the host's memory) it is one strided
// copy of the backend, which also converts the dtype. Between the host and a GPU, or two GPUs, the
// bytes cross with the CUDA backend's copy_between, which moves dense memory only, so:
//   - the source is first made dense on its own device (a strided gather there, never over the link);
//   - the dtype is converted on the GPU side (its kernels know every dtype, bfloat16 and float16 included):
//     before the transfer when the source is on a GPU, after it when the source is on the host.
Tensor copy_to(const Tensor& src, Device device, DType dtype) {
  const Device from = src.device();
  const bool same_memory = from == device || (from.is_cpu() && device.is_cpu());
  if (!same_memory && src.numel() > 0) {
    const bool convert_first = from.is_cuda();
    const DType wire = convert_first ? dtype : src.dtype();  // the dtype that crosses the link
    Tensor dense = src;
    if (!src.is_contiguous() || src.dtype() != wire) dense = copy_to(src, from, wire);
    Tensor landed = empty(src.shape(), TensorOptions(wire).device(device));
    kernels::backend_for(DeviceKind::CUDA, "to")
        .copy_between(from.kind, from.index, dense.data(), device.kind, device.index, landed.data(),
                      dense.numel() * dtype_size(wire));
    return wire == dtype ? landed : copy_to(landed, device, dtype);
  }
  Tensor dst = empty(src.shape(), TensorOptions(dtype).device(device));
  if (src.numel() == 0) return dst;
  kernels::backend_for(device.kind, "to")
      .copy(src.dtype(), ops::desc_of(src), dtype, ops::desc_of(dst), ops::stream_of(dst));
  return dst;
}

// The bytes of the storage a view can touch, [first, last] (all of it when a stride is negative).
std::pair<int64_t, int64_t> byte_span(const Tensor& t) {
  const int64_t size = t.element_size();
  int64_t first = t.offset() * size, last = first + size - 1;
  for (int64_t d = 0; d < t.shape().size(); ++d) {
    if (t.strides()[d] < 0) return {0, INT64_MAX};
    last += (t.shape()[d] - 1) * t.strides()[d] * size;
  }
  return {first, last};
}

// Whether views of one storage may share an element. A strided copy -- the CPU's loop, a GPU kernel or
// cudaMemcpy -- between such views has no defined result (part of the source is overwritten before it
// is read, in an order that depends on the schedule), so copy_ reads a copy of the source instead.
bool may_overlap(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage()) return false;
  const auto [a_first, a_last] = byte_span(a);
  const auto [b_first, b_last] = byte_span(b);
  return a_first <= b_last && b_first <= a_last;
}

// The first dimension along which `t` repeats an element (stride 0, more than one index), or -1.
int repeated_dim(const Tensor& t) {
  for (int64_t d = 0; d < t.shape().size(); ++d)
    if (t.strides()[d] == 0 && t.shape()[d] > 1) return static_cast<int>(d);
  return -1;
}

}  // namespace

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = copy_to(*this, device(), dtype());
  if (needs_grad(*this)) record<CloneBackward>(out, {*this});
  return out;
}

Tensor Tensor::to(Device device, DType dtype) const {
  if (device == this->device() && dtype == this->dtype()) return *this;
  check_device(device, "to");
  RINGGRAD_CHECK(!requires_grad() || is_floating(dtype),
                 "to: a tensor that requires grad can only be converted to "
                 "a floating dtype, got ",
                 dtype, "; call .detach() first");
  Tensor out = copy_to(*this, device, dtype);
  if (needs_grad(*this)) {
    auto& node = record<ToBackward>(out, {*this});
    node.source_device = this->device();
    node.source_dtype = this->dtype();
  }
  return out;
}

Tensor Tensor::to(Device device) const { return to(device, dtype()); }

const Tensor& Tensor::copy_(const Tensor& src) const {
  ops::check_defined("copy_", src, "src");
  RINGGRAD_CHECK(src.shape() == shape(), "copy_: expected src of shape ", shape(), ", got ", src.shape());
  RINGGRAD_CHECK(!(GradMode::is_enabled() && requires_grad() && is_leaf()),
                 "copy_: a leaf that requires grad cannot be changed in place while grad mode is on; "
                 "wrap the update in NoGradGuard");
  RINGGRAD_CHECK(!requires_grad() || is_leaf() || !GradMode::is_enabled(),
                 "copy_: in-place writes to a tensor that is part of a graph are not supported");
  if (numel() == 0) return *this;
  const int repeated = repeated_dim(*this);
  RINGGRAD_CHECK(repeated < 0, "copy_: expected a destination whose elements are distinct, got one that repeats ",
                 "each element along dimension ", repeated, " (stride 0, as expand makes), where the winning ",
                 "write is undefined; copy into a clone() of it");
  if (may_overlap(src, *this)) {
    if (src.offset() == offset() && src.strides() == strides() && src.dtype() == dtype()) return *this;  // itself
    return copy_(src.detach().clone());
  }
  // A source on another device is first brought here; then one strided copy (with dtype cast).
  // Logical CPU devices all live in host memory, so between them the strided copy reads the source
  // directly (DataParallel's gather writes each replica's output into its slice this way).
  const bool same_memory = src.device() == device() || (src.device().is_cpu() && device().is_cpu());
  const Tensor here = same_memory ? src : src.detach().to(device());
  kernels::backend_for(device().kind, "copy_")
      .copy(here.dtype(), ops::desc_of(here), dtype(), ops::desc_of(*this), ops::stream_of(*this));
  return *this;
}

void Tensor::set_data(const Tensor& src) const {
  ops::check_defined("set_data", *this, "the tensor");
  ops::check_defined("set_data", src, "src");
  RINGGRAD_CHECK(!requires_grad() || is_floating(src.dtype()),
                 "set_data: a tensor that requires grad must stay "
                 "floating, got ",
                 src.dtype());
  TensorImpl& self = *impl();
  const TensorImpl& from = *src.impl();
  self.shape = from.shape;
  self.strides = from.strides;
  self.offset = from.offset;
  self.dtype = from.dtype;
  self.device = from.device;
  self.storage = from.storage;
}
Tensor Tensor::to(DType dtype) const { return to(device(), dtype); }

}  // namespace ringgrad
