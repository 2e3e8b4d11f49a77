/// @file
/// kernels/compare.h: the comparison family -- elementwise comparisons that make a mask, selection by
/// a mask (where), and the triangle of a matrix (tril, triu): the kernels behind eq ... ge, where,
/// masked_fill, tril and triu (core/ops/compare.cpp), and so behind attention's causal mask.
///
/// Masks are uint8 arrays of 0 and 1 (PyTorch's bool). Inputs come as strided descriptors already
/// broadcast to the output's shape (stride 0 along a stretched dimension, kernels/backend.h's
/// convention for Backend::binary); outputs are dense.
///
/// Implemented by kernels/cpu/compare.cpp and kernels/cuda/compare.cu.
#pragma once

#include <cstdint>

#include <ringgrad/core/base/device.h>
#include <ringgrad/core/base/dtype.h>
#include <ringgrad/core/base/strided.h>
#include <ringgrad/kernels/family.h>
#include <ringgrad/kernels/unary_ops.h>  // RINGGRAD_HOST_DEVICE

namespace ringgrad {
namespace kernels {

/// The comparison of CompareKernels::compare: a == b, a != b, a < b, a <= b, a > b, a >= b.
enum class CompareOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };

/// a op b for one pair of values, as both backends' kernels compute it (NaN: only Ne holds).
template <typename A>
RINGGRAD_HOST_DEVICE inline bool compare_values(CompareOp op, A a, A b) {
  switch (op) {
    case CompareOp::Eq: return a == b;
    case CompareOp::Ne: return a != b;
    case CompareOp::Lt: return a < b;
    case CompareOp::Le: return a <= b;
    case CompareOp::Gt: return a > b;
    case CompareOp::Ge: return a >= b;
  }
  return false;
}

/// The comparison kernels of one backend. Work is queued on `s` (kernels/backend.h's conventions).
struct CompareKernels {
  static constexpr const char* kName = "compare";
  virtual ~CompareKernels() = default;

  /// out[i] = (a[i] op b[i]) ? 1 : 0, out a dense uint8 array of a's shape; a and b of dtype dt, with
  /// a NaN comparing unequal to everything (so only Ne is true for it), as IEEE and PyTorch say.
  virtual void compare(CompareOp op, DType dt, const StridedDesc& a, const StridedDesc& b, uint8_t* out,
                       Stream s) const = 0;

  /// out[i] = cond[i] ? a[i] : b[i], out dense of dtype dt (a and b's), cond uint8. Any dtype.
  virtual void where(DType dt, const StridedDesc& cond, const StridedDesc& a, const StridedDesc& b, void* out,
                     Stream s) const = 0;

  /// For `batch` dense [rows x cols] matrices: y[b, i, j] = x[b, i, j] where the element is kept, else
  /// 0. tril keeps j - i <= diagonal, triu (upper) keeps j - i >= diagonal. y may be x. Any dtype.
  virtual void triangle(DType dt, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal,
                        bool upper, Stream s) const = 0;
};

}  // namespace kernels
}  // namespace ringgrad
