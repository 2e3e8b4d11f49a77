// core/tensor.cpp: Tensor's metadata, element access and autograd state. Views live in
// core/ops/views.cpp, copies in core/ops/copy.cpp, factories in core/factories.cpp.
#include <ringgrad/core/tensor.h>

#include <cstring>

#include <ringgrad/core/autograd/engine.h>
#include <ringgrad/core/autograd/node.h>
#include <ringgrad/core/base/fp16.h>
#include "core/ops/op_utils.h"

namespace ringgrad {

TensorImpl::~TensorImpl() = default;

int64_t Tensor::size(int64_t dim) const {
  RINGGRAD_CHECK(this->dim() > 0, "size: a 0-d tensor has no dimensions, asked for dim ", dim);
  return shape()[ops::wrap_dim(dim, this->dim(), "size")];
}
int64_t Tensor::stride(int64_t dim) const {
  RINGGRAD_CHECK(this->dim() > 0, "stride: a 0-d tensor has no dimensions, asked for dim ", dim);
  return strides()[ops::wrap_dim(dim, this->dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // nothing to lay out, as in PyTorch
  int64_t expected = 1;
  const TensorImpl& t = checked();
  for (int64_t i = t.shape.size() - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void* Tensor::data() const {
  const TensorImpl& t = checked();
  if (!t.storage || !t.storage->data()) return nullptr;  // empty tensor
  return static_cast<char*>(t.storage->data()) + t.offset * dtype_size(t.dtype);
}

double Tensor::item() const {
  RINGGRAD_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape());
  const Tensor cpu = device().is_cpu() ? *this : to(Device::cpu());
  switch (cpu.dtype()) {
    case DType::f32: return *static_cast<const float*>(cpu.data());
    case DType::f64: return *static_cast<const double*>(cpu.data());
    case DType::i64: return static_cast<double>(*static_cast<const int64_t*>(cpu.data()));
    case DType::u8: return *static_cast<const uint8_t*>(cpu.data());
    case DType::bf16: {
      uint16_t bits = *static_cast<const uint16_t*>(cpu.data());
      uint32_t wide = static_cast<uint32_t>(bits) << 16;  // bfloat16 is the top half of a float32
      float f;
      std::memcpy(&f, &wide, sizeof f);
      return f;
    }
    case DType::f16: return fp16_to_float(*static_cast<const uint16_t*>(cpu.data()));
  }
  return 0.0;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  const Tensor dense = to(Device::cpu(), dtype_of<T>::value).contiguous();
  const T* p = static_cast<const T*>(dense.data());
  return std::vector<T>(p, p + dense.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

// --- autograd state ------------------------------------------------------------------------------

AutogradMeta& Tensor::autograd_meta() const {
  TensorImpl& t = checked();
  if (!t.autograd) t.autograd = std::make_unique<AutogradMeta>();
  return *t.autograd;
}

bool Tensor::requires_grad() const {
  const TensorImpl& t = checked();
  return t.autograd && (t.autograd->requires_grad || t.autograd->grad_fn);
}

Tensor& Tensor::requires_grad_(bool requires) {
  RINGGRAD_CHECK(is_leaf(), "requires_grad_: only leaf tensors can change requires_grad; this tensor was made by ",
                 grad_fn()->name(), " (use .detach() to get a leaf)");
  RINGGRAD_CHECK(!requires || is_floating(dtype()),
                 "requires_grad_: only floating-point tensors can require grad, got ", dtype());
  autograd_meta().requires_grad = requires;
  return *this;
}

bool Tensor::is_leaf() const {
  const TensorImpl& t = checked();
  return !t.autograd || !t.autograd->grad_fn;
}

Tensor Tensor::grad() const {
  const TensorImpl& t = checked();
  return t.autograd ? t.autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    RINGGRAD_CHECK(grad.shape() == shape(), "set_grad: expected a gradient of shape ", shape(), ", got ", grad.shape());
    ops::check_same("set_grad", *this, grad, "the tensor", "grad");
  }
  autograd_meta().grad = grad;
}

void Tensor::set_grad_destination(const Tensor& destination) const {
  RINGGRAD_CHECK(is_leaf(), "set_grad_destination: expected a leaf, got the output of ", grad_fn()->name());
  if (destination.defined()) {
    RINGGRAD_CHECK(destination.shape() == shape(), "set_grad_destination: expected a destination of shape ", shape(),
                   ", got ", destination.shape());
    ops::check_same("set_grad_destination", *this, destination, "the tensor", "destination");
  }
  autograd_meta().grad_destination = destination;
}

Tensor Tensor::grad_destination() const {
  const TensorImpl& t = checked();
  return t.autograd ? t.autograd->grad_destination : Tensor();
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> kNone;
  const TensorImpl& t = checked();
  return t.autograd ? t.autograd->grad_fn : kNone;
}

int Tensor::output_nr() const {
  const TensorImpl& t = checked();
  return t.autograd ? t.autograd->output_nr : 0;
}

Tensor Tensor::detach() const {
  const TensorImpl& t = checked();
  return ops::make_view(*this, t.shape, t.strides, t.offset);
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const { run_backward({*this}, {grad}, retain_graph); }

void Tensor::register_hook(TensorHook hook) const {
  RINGGRAD_CHECK(requires_grad(), "register_hook: expected a tensor that requires grad; call requires_grad_() first");
  if (is_leaf()) {
    autograd_meta().hooks.push_back(std::move(hook));
  } else {
    // A non-leaf's gradient is an input of its grad_fn, so the hook runs just before that node.
    grad_fn()->pre_hooks.push_back({output_nr(), std::move(hook)});
  }
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateHook hook) const {
  RINGGRAD_CHECK(is_leaf() && requires_grad(),
                 "register_post_accumulate_grad_hook: expected a leaf that requires grad (a parameter)");
  autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

std::shared_ptr<Node> Tensor::grad_accumulator() const {
  RINGGRAD_CHECK(is_leaf() && requires_grad(), "grad_accumulator: expected a leaf that requires grad");
  AutogradMeta& meta = autograd_meta();
  std::shared_ptr<Node> node = meta.grad_accumulator.lock();
  if (!node) {
    // The node holds the leaf strongly and the leaf the node weakly: the node lives as long as a
    // graph (or a DDP reducer) points at it, and one node serves every use of the leaf.
    node = std::make_shared<AccumulateGrad>(*this);
    meta.grad_accumulator = node;
  }
  return node;
}

}  // namespace ringgrad
