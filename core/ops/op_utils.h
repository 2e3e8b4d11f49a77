// core/ops/op_utils.h: argument checks and small helpers shared by the op files (not public API).
#pragma once

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/autograd/node.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace ops {

// Dimension `dim` of an n-d tensor, allowing negative values (-1 is the last).
inline int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t n = ndim == 0 ? 1 : ndim;  // a 0-d tensor accepts dim 0 and -1, as in PyTorch
  RINGGRAD_CHECK(dim >= -n && dim < n, op, ": expected dim in [", -n, ", ", n - 1, "], got ", dim);
  return dim < 0 ? dim + n : dim;
}

inline void check_defined(const char* op, const Tensor& t, const char* arg) {
  RINGGRAD_CHECK(t.defined(), op, ": expected ", arg, " to be a defined tensor, got an undefined one");
}

// Float math runs on float32 and float64; bfloat16 and float16 only on CUDA (the CPU backend holds
// them but computes nothing in them).
inline void check_floating(const char* op, const Tensor& t, const char* arg = "x") {
  check_defined(op, t, arg);
  const DType dt = t.dtype();
  RINGGRAD_CHECK(
      dt == DType::f32 || dt == DType::f64 || ((dt == DType::bf16 || dt == DType::f16) && t.device().is_cuda()), op,
      ": expected ", arg, " to be float32 or float64, got ", dt);
}

// b must match a's dtype and device: ringgrad never moves data behind the user's back, and ops that
// promote dtypes (promote_types; an integer operand of a binary op) convert before this check.
inline void check_same(const char* op, const Tensor& a, const Tensor& b, const char* a_name = "a",
                       const char* b_name = "b") {
  RINGGRAD_CHECK(a.dtype() == b.dtype(), op, ": expected ", b_name, " to have dtype ", a.dtype(), " (", a_name,
                 "'s dtype), got ", b.dtype(), "; convert with .to(DType::", a.dtype() == DType::f64 ? "f64" : "f32",
                 ")");
  RINGGRAD_CHECK(a.device() == b.device(), op, ": expected ", b_name, " on ", a.device(), " (", a_name,
                 "'s device), got ", b.device(), "; call ", b_name,
                 ".to(Device::", a.device().is_cpu() ? "cpu(" : "cuda(", a.device().index, "))");
}

inline kernels::Backend& backend_of(const Tensor& t, const char* op) {
  return kernels::backend_for(t.device().kind, op);
}

// The device stream kernels run on: null on the CPU; on cuda:k the CUDA backend's stream of that GPU,
// so all of a device's work runs in order.
inline Stream stream_of(const Tensor& t) {
  return kernels::backend_for(t.device().kind, "stream_of").stream_for(t.device().index);
}

// The int64 elements (labels, indices) of t as a kernel argument, on whatever device t lives;
// Tensor::data<T>() is for host code and rejects GPU tensors.
inline const int64_t* index_data(const Tensor& t) {
  RINGGRAD_CHECK(t.dtype() == DType::i64, "index_data: expected an int64 tensor, got ", t.dtype());
  return static_cast<const int64_t*>(t.data());
}

// How a kernel sees a tensor: pointer + shape + strides in elements.
inline StridedDesc desc_of(const Tensor& t) {
  StridedDesc d;
  d.data = t.data();
  d.ndim = static_cast<int>(t.dim());
  for (int i = 0; i < d.ndim; ++i) {
    d.shape[i] = t.shape()[i];
    d.strides[i] = t.strides()[i];
  }
  return d;
}

// A view of t with `shape`, stride 0 where t is broadcast (t's dims are aligned to the right): how
// a broadcasting op hands an operand to its kernel without copying it.
inline StridedDesc broadcast_desc(const Tensor& t, const Shape& shape) {
  StridedDesc d;
  d.data = t.data();
  d.ndim = static_cast<int>(shape.size());
  const int64_t lead = shape.size() - t.dim();
  for (int64_t i = 0; i < shape.size(); ++i) {
    d.shape[i] = shape[i];
    d.strides[i] = (i < lead || t.size(i - lead) == 1) ? 0 : t.stride(i - lead);
  }
  return d;
}

// A tensor sharing `base`'s storage with another shape/strides/offset (no autograd attached).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

}  // namespace ops
}  // namespace ringgrad
