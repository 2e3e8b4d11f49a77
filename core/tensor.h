// core/tensor.h: Tensor, a cheap handle to an n-d array on one device, plus its autograd state.
//
// A Tensor is a shared pointer to a TensorImpl: copying a Tensor copies the handle, not the data.
// The impl holds the *view* (shape, strides, offset into a Storage) and the dtype and device; views
// made by reshape, transpose, narrow, expand ... share the storage of their base. Autograd state
// (requires_grad, grad, grad_fn, hooks) lives in an AutogradMeta that plain tensors never allocate.
//
// The ops (add, matmul, softmax ...) are free functions declared in core/ops.h; the methods here are
// the ones PyTorch users call with a dot.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <ringgrad/core/device.h>
#include <ringgrad/core/base/dtype.h>
#include <ringgrad/core/base/error.h>
#include <ringgrad/core/shape.h>
#include <ringgrad/core/storage.h>

namespace ringgrad {

struct Node;
struct AutogradMeta;
class Tensor;

// A hook on a gradient: it sees the gradient flowing into a tensor and may return a replacement
// (return an undefined Tensor to keep the gradient as it is).
using TensorHook = std::function<Tensor(const Tensor& grad)>;
// Runs after a leaf's .grad was updated; DDP's reducer marks the parameter ready here.
using PostAccumulateHook = std::function<void(const Tensor& leaf)>;

struct TensorImpl {
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements, from storage->data()
  DType dtype = DType::f32;
  Device device;
  std::shared_ptr<Storage> storage;
  std::unique_ptr<AutogradMeta> autograd;  // null until autograd is involved

  ~TensorImpl();
};

// dtype and device (and requires_grad) for a factory. Implicit from a DType or a Device, so
// zeros({2, 3}, DType::f64) and zeros({2, 3}, Device::cpu(1)) both read naturally.
struct TensorOptions {
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu(0);
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(DType dt) : dtype_(dt) {}  // NOLINT: implicit on purpose
  TensorOptions(Device d) : device_(d) {}  // NOLINT: implicit on purpose
  TensorOptions& dtype(DType dt) {
    dtype_ = dt;
    return *this;
  }
  TensorOptions& device(Device d) {
    device_ = d;
    return *this;
  }
  TensorOptions& requires_grad(bool r = true) {
    requires_grad_ = r;
    return *this;
  }
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds nothing; defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }  // same handle target
  long use_count() const { return impl_.use_count(); }                   // handles sharing this impl

  // --- metadata ----------------------------------------------------------------------------------
  const Shape& shape() const { return checked().shape; }
  const Shape& strides() const { return checked().strides; }
  int64_t dim() const { return shape().size(); }
  int64_t size(int64_t dim) const;  // negative dims count from the end, as in PyTorch
  int64_t stride(int64_t dim) const;
  int64_t numel() const { return shape().numel(); }
  int64_t offset() const { return checked().offset; }
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().device; }
  int64_t element_size() const { return dtype_size(dtype()); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }

  // Pointer to the first element (storage data + offset). data<T>() also checks the dtype and that
  // the tensor is on the CPU, since only there may the host dereference it.
  void* data() const;
  template <typename T>
  T* data() const {
    RINGGRAD_CHECK(dtype() == dtype_of<T>::value, "Tensor::data<T>: expected dtype ", dtype_of<T>::value, ", got ",
                   dtype());
    RINGGRAD_CHECK(device().is_cpu(), "Tensor::data<T>: expected a CPU tensor, got one on ", device(),
                   "; call .to(Device::cpu()) first");
    return static_cast<T*>(data());
  }

  // --- element access and conversion ------------------------------------------------------------
  double item() const;  // the value of a one-element tensor, as double
  template <typename T>
  T item() const {
    return static_cast<T>(item());
  }
  template <typename T>
  std::vector<T> to_vector() const;  // all elements in row-major order (copies to the CPU if needed)

  // --- views: share storage with this tensor (differentiable) ------------------------------------
  Tensor view(const Shape& shape) const;     // needs a contiguous tensor; one size may be -1
  Tensor reshape(const Shape& shape) const;  // a view when possible, otherwise a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // size -1 keeps a dimension; new dims go in front
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;

  // --- copies ------------------------------------------------------------------------------------
  Tensor contiguous() const;  // this tensor if already dense, else a dense copy
  Tensor clone() const;       // always a dense copy (differentiable)
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;

  // --- in place (not recorded by autograd) -------------------------------------------------------
  // Copies src's values into this tensor's memory (same shape; dtype converted). On a leaf that
  // requires grad it is only allowed under NoGradGuard, as in PyTorch.
  const Tensor& copy_(const Tensor& src) const;
  // Makes this handle point at src's storage, shape, dtype and device while keeping its autograd
  // identity (requires_grad, hooks). Module::to() moves parameters this way, so every handle to a
  // parameter -- the model's member, an optimizer's list -- sees the move.
  void set_data(const Tensor& src) const;

  // --- autograd ----------------------------------------------------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires = true);  // only on leaves, returns *this
  bool is_leaf() const;
  Tensor grad() const;  // accumulated gradient of a leaf; undefined before the first backward
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<Node>& grad_fn() const;
  int output_nr() const;
  Tensor detach() const;  // same data, cut from the graph
  // Runs backward from this tensor. `grad` defaults to 1 for a one-element tensor. Without
  // retain_graph the graph's saved tensors are released and a second backward through it throws.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // Hooks run in registration order on the gradient w.r.t. this tensor, before it is used.
  void register_hook(TensorHook hook) const;
  // Leaves only: runs after .grad has been updated by a backward.
  void register_post_accumulate_grad_hook(PostAccumulateHook hook) const;
  // Leaves only: the AccumulateGrad node that adds incoming gradients into .grad (created on demand).
  std::shared_ptr<Node> grad_accumulator() const;

  AutogradMeta& autograd_meta() const;  // created on first call

 private:
  TensorImpl& checked() const {
    RINGGRAD_CHECK(impl_ != nullptr, "Tensor: this tensor is undefined (default-constructed)");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

struct AutogradMeta {
  bool requires_grad = false;            // set on leaves by requires_grad_(); on outputs by record()
  Tensor grad;                           // leaves only
  std::shared_ptr<Node> grad_fn;         // null on leaves
  int output_nr = 0;                     // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;  // leaves only; weak, or leaf -> node -> leaf would be a cycle
  std::vector<TensorHook> hooks;         // leaves only (non-leaf hooks live on grad_fn)
  std::vector<PostAccumulateHook> post_accumulate_hooks;
};

// --- factories -------------------------------------------------------------------------------------
class Generator;

Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
Tensor arange(int64_t end, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// Uniform [0, 1) and standard normal, from a Generator, an explicit seed, or the default generator.
Tensor rand(const Shape& shape, TensorOptions options, Generator& generator);
Tensor rand(const Shape& shape, TensorOptions options, uint64_t seed);
Tensor rand(const Shape& shape, TensorOptions options = {});
Tensor randn(const Shape& shape, TensorOptions options, Generator& generator);
Tensor randn(const Shape& shape, TensorOptions options, uint64_t seed);
Tensor randn(const Shape& shape, TensorOptions options = {});

// A tensor holding a copy of `values` (dtype from T: float -> float32, double -> float64, int64_t,
// uint8_t), with the given shape or 1-D.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())});
}
Tensor scalar_tensor(double value, TensorOptions options = {});

// Printing in PyTorch's style: tensor([[1.0000, 2.0000]], dtype=float64, requires_grad=true)
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

}  // namespace ringgrad
