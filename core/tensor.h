/// @file
/// core/tensor.h: Tensor, a cheap handle to an n-d array on one device, plus its autograd state.
///
/// A Tensor is a shared pointer to a TensorImpl: copying a Tensor copies the handle, not the data.
/// The impl holds the *view* (shape, strides, offset into a Storage) and the dtype and device; views
/// made by reshape, transpose, narrow, expand ... share the storage of their base. Autograd state
/// (requires_grad, grad, grad_fn, hooks) lives in an AutogradMeta that plain tensors never allocate.
///
/// The ops (add, matmul, softmax ...) are free functions declared in core/ops.h; the methods here are
/// the ones PyTorch users call with a dot.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/core/device.h>
#include <ringgrad/core/base/dtype.h>
#include <ringgrad/core/base/error.h>
#include <ringgrad/core/shape.h>
#include <ringgrad/core/storage.h>

/// @namespace ringgrad
/// Everything of ringgrad. This namespace itself holds core: Tensor, the ops (core/ops.h), autograd
/// and devices; nn, parallel and kernels are below it.

namespace ringgrad {

struct Node;
struct AutogradMeta;
class Tensor;

/// A hook on a gradient: it sees the gradient flowing into a tensor and may return a replacement
/// (return an undefined Tensor to keep the gradient as it is).
using TensorHook = std::function<Tensor(const Tensor& grad)>;
/// Runs after a leaf's .grad was updated; DDP's reducer marks the parameter ready here.
using PostAccumulateHook = std::function<void(const Tensor& leaf)>;

/// What a Tensor handle points at: a strided view (shape, strides, offset) of a Storage, with its
/// dtype and device, and the autograd state once there is any. Views share the Storage.
struct TensorImpl {
  Shape shape;                             ///< sizes, one per dimension
  Shape strides;                           ///< in elements
  int64_t offset = 0;                      ///< in elements, from storage->data()
  DType dtype = DType::f32;                ///< the element type
  Device device;                           ///< where the storage lives
  std::shared_ptr<Storage> storage;        ///< the memory, shared by every view of it
  std::unique_ptr<AutogradMeta> autograd;  ///< null until autograd is involved

  ~TensorImpl();
};

/// dtype and device (and requires_grad) for a factory. Implicit from a DType or a Device, so
/// zeros({2, 3}, DType::f64) and zeros({2, 3}, Device::cpu(1)) both read naturally.
struct TensorOptions {
  TensorOptions() = default;
  TensorOptions(DType dt) : dtype_(dt) {}         // NOLINT: implicit on purpose, so empty({2}, DType::f64) works
  TensorOptions(Device d) : device_(d) {}         // NOLINT: implicit on purpose
  RINGGRAD_ARG(DType, dtype) = DType::f32;        ///< the element type
  RINGGRAD_ARG(Device, device) = Device::cpu(0);  ///< where the storage lives
  RINGGRAD_ARG(bool, requires_grad) = false;      ///< make the new tensor a leaf that records gradients
};

/// An n-d array on one device: a cheap, shared handle (copying a Tensor copies the handle, not the
/// data), plus its autograd state. Every accessor of an undefined tensor throws ringgrad::Error.
class Tensor {
 public:
  Tensor() = default;  ///< undefined: holds nothing; defined() is false
  /// A handle to `impl` (what ops build their results with).
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// False for a default-constructed (undefined) tensor.
  bool defined() const { return impl_ != nullptr; }
  /// The shared state this handle points at; null when undefined.
  TensorImpl* impl() const { return impl_.get(); }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }  ///< same handle target
  long use_count() const { return impl_.use_count(); }                   ///< handles sharing this impl

  // --- metadata ----------------------------------------------------------------------------------
  /// The size of each dimension.
  const Shape& shape() const { return checked().shape; }
  /// The step, in elements, between neighbours along each dimension.
  const Shape& strides() const { return checked().strides; }
  /// The number of dimensions (0 for a scalar).
  int64_t dim() const { return shape().size(); }
  int64_t size(int64_t dim) const;                              ///< negative dims count from the end, as in PyTorch
  int64_t stride(int64_t dim) const;                            ///< in elements; negative dims count from the end
  int64_t numel() const { return shape().numel(); }             ///< the number of elements (1 for a scalar)
  int64_t offset() const { return checked().offset; }           ///< of the first element in the storage, in elements
  DType dtype() const { return checked().dtype; }               ///< the element type
  Device device() const { return checked().device; }            ///< the device the data lives on
  int64_t element_size() const { return dtype_size(dtype()); }  ///< bytes per element
  /// True when the elements are dense in row-major order (the strides of contiguous_strides(shape)).
  bool is_contiguous() const;
  /// The memory this tensor views (shared with every other view of it).
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }

  /// Pointer to the first element (storage data + offset). data<T>() also checks the dtype and that
  /// the tensor is on the CPU, since only there may the host dereference it.
  void* data() const;
  /// Typed pointer to the first element; throws unless the dtype is T's and the tensor is on the CPU.
  template <typename T>
  T* data() const {
    RINGGRAD_CHECK(dtype() == dtype_of<T>::value, "Tensor::data<T>: expected dtype ", dtype_of<T>::value, ", got ",
                   dtype());
    RINGGRAD_CHECK(device().is_cpu(), "Tensor::data<T>: expected a CPU tensor, got one on ", device(),
                   "; call .to(Device::cpu()) first");
    return static_cast<T*>(data());
  }

  // --- element access and conversion ------------------------------------------------------------
  double item() const;  ///< the value of a one-element tensor, as double
  /// The value of a one-element tensor, converted to T.
  template <typename T>
  T item() const {
    return static_cast<T>(item());
  }
  template <typename T>
  std::vector<T> to_vector() const;  ///< all elements in row-major order (copies to the CPU if needed)

  // --- views: share storage with this tensor (differentiable) ------------------------------------
  /// The same elements seen with another shape (one size may be -1), without moving any: PyTorch's
  /// view rules, so a transposed matrix can be split along a dim but not flattened. Throws when the
  /// strides do not allow it.
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;  ///< view() when the strides allow it, otherwise a copy
  /// Merges dims start_dim..end_dim into one (a 0-d tensor becomes 1-D); reshape's rules apply.
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  /// Swaps two dimensions (a view).
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  ///< transpose of a 2-D tensor
  /// Reorders the dimensions: dimension i of the result is dimension dims[i] of this tensor.
  /// @throws ringgrad::Error unless dims is a permutation of 0 .. dim()-1.
  Tensor permute(const Shape& dims) const;
  /// Elements start .. start+length-1 of dimension `dim`; throws when they are out of range.
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  /// Elements start, start+step, ... before end of dimension `dim`, with Python's rules: negative
  /// bounds count from the end, out-of-range bounds are clamped. step must be positive.
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  /// Element `index` (negative counts from the end) of dimension `dim`, which is removed.
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  ///< size -1 keeps a dimension; new dims go in front
  Tensor squeeze() const;                   ///< removes every dimension of size 1
  Tensor squeeze(int64_t dim) const;        ///< removes dimension `dim` if its size is 1
  Tensor unsqueeze(int64_t dim) const;      ///< inserts a dimension of size 1 before `dim`

  // --- copies ------------------------------------------------------------------------------------
  Tensor contiguous() const;  ///< this tensor if already dense, else a dense copy
  Tensor clone() const;       ///< always a dense copy (differentiable)
  /// A copy on `device` (differentiable); this tensor itself when it is already there.
  Tensor to(Device device) const;
  /// A copy converted to `dtype` (differentiable); this tensor itself when it already has it.
  Tensor to(DType dtype) const;
  /// Both at once. A tensor that requires grad can only be converted to a floating dtype.
  Tensor to(Device device, DType dtype) const;

  // --- in place (not recorded by autograd) -------------------------------------------------------
  /// Copies src's values into this tensor's memory (same shape; dtype converted). On a leaf that
  /// requires grad it is only allowed under NoGradGuard, as in PyTorch.
  const Tensor& copy_(const Tensor& src) const;
  /// Makes this handle point at src's storage, shape, dtype and device while keeping its autograd
  /// identity (requires_grad, hooks). Module::to() moves parameters this way, so every handle to a
  /// parameter -- the model's member, an optimizer's list -- sees the move.
  void set_data(const Tensor& src) const;

  // --- autograd ----------------------------------------------------------------------------------
  bool requires_grad() const;                    ///< whether gradients flow to (or through) this tensor
  Tensor& requires_grad_(bool requires = true);  ///< only on leaves, returns *this
  bool is_leaf() const;  ///< true unless the tensor is the output of a recorded op (has a grad_fn)
  Tensor grad() const;   ///< accumulated gradient of a leaf; undefined before the first backward
  /// Replaces the accumulated gradient (undefined clears it); a defined one must match this tensor's
  /// shape, dtype and device.
  void set_grad(const Tensor& grad) const;
  /// The node that computed this tensor, or null for a leaf.
  const std::shared_ptr<Node>& grad_fn() const;
  int output_nr() const;  ///< which output of grad_fn() this tensor is
  Tensor detach() const;  ///< same data, cut from the graph
  /// Runs backward from this tensor. `grad` defaults to 1 for a one-element tensor. Without
  /// retain_graph the graph's saved tensors are released and a second backward through it throws.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  /// Hooks run in registration order on the gradient w.r.t. this tensor, before it is used.
  void register_hook(TensorHook hook) const;
  /// Leaves only: runs after .grad has been updated by a backward.
  void register_post_accumulate_grad_hook(PostAccumulateHook hook) const;
  /// Leaves only: the AccumulateGrad node that adds incoming gradients into .grad (created on demand).
  std::shared_ptr<Node> grad_accumulator() const;
  /// Leaves only: memory that the gradient is to live in, provided by the leaf's owner (DDP's buckets:
  /// a view of the flat buffer it all-reduces). While .grad is undefined or is this tensor, backward
  /// writes the gradient there and .grad becomes it: a backward that can compute the gradient in
  /// place does so (a GEMM writing its output there, adding when .grad already holds one), any other
  /// backward's result is copied or added in. A .grad that is some other tensor (set_grad) is
  /// accumulated as usual and the destination is left alone. Same shape, dtype and device as this
  /// tensor; undefined (the default, or passed here) turns it off.
  void set_grad_destination(const Tensor& destination) const;
  Tensor grad_destination() const;  ///< see set_grad_destination(); undefined when none is set

  AutogradMeta& autograd_meta() const;  ///< created on first call

 private:
  TensorImpl& checked() const {
    RINGGRAD_CHECK(impl_ != nullptr, "Tensor: this tensor is undefined (default-constructed)");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

/// A tensor's autograd state, created on first use (Tensor::autograd_meta()).
struct AutogradMeta {
  bool requires_grad = false;            ///< set on leaves by requires_grad_(); on outputs by record()
  Tensor grad;                           ///< leaves only
  std::shared_ptr<Node> grad_fn;         ///< null on leaves
  int output_nr = 0;                     ///< which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;  ///< leaves only; weak, or leaf -> node -> leaf would be a cycle
  std::vector<TensorHook> hooks;         ///< leaves only (non-leaf hooks live on grad_fn)
  std::vector<PostAccumulateHook> post_accumulate_hooks;  ///< leaves only
  Tensor grad_destination;  ///< leaves only: where .grad is to live (Tensor::set_grad_destination)
};

// --- factories -------------------------------------------------------------------------------------
class Generator;

/// A tensor of `shape` whose values are not initialised (float32 on cpu:0 unless `options` say).
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});               ///< filled with 0
Tensor ones(const Shape& shape, TensorOptions options = {});                ///< filled with 1
Tensor full(const Shape& shape, double value, TensorOptions options = {});  ///< filled with `value`
/// The 1-D tensor start, start + step, ... up to but excluding end, as torch.arange.
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
/// 0, 1, ..., end - 1.
Tensor arange(int64_t end, TensorOptions options = {});
Tensor empty_like(const Tensor& t);  ///< uninitialised, with t's shape, dtype and device
Tensor zeros_like(const Tensor& t);  ///< zeros with t's shape, dtype and device
Tensor ones_like(const Tensor& t);   ///< ones with t's shape, dtype and device
///@{
/// Uniform [0, 1) and standard normal, from a Generator, an explicit seed, or the default generator.
Tensor rand(const Shape& shape, TensorOptions options, Generator& generator);
Tensor rand(const Shape& shape, TensorOptions options, uint64_t seed);
Tensor rand(const Shape& shape, TensorOptions options = {});
Tensor randn(const Shape& shape, TensorOptions options, Generator& generator);
Tensor randn(const Shape& shape, TensorOptions options, uint64_t seed);
Tensor randn(const Shape& shape, TensorOptions options = {});
///@}

/// A tensor holding a copy of `values` (dtype from T: float -> float32, double -> float64, int64_t,
/// uint8_t), with the given shape or 1-D.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
/// A 1-D tensor holding a copy of `values` on the CPU.
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())});
}
Tensor scalar_tensor(double value, TensorOptions options = {});  ///< a 0-d tensor holding `value`

/// Printing in PyTorch's style: tensor([[1.0000, 2.0000]], dtype=float64, requires_grad=true)
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);  ///< what operator<< prints, as a string

}  // namespace ringgrad
