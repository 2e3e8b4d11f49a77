/// @file
/// kernels/indexing.h: the indexing family -- copying rows by index (index_select, gather) and adding
/// them back (index_add, scatter_add), the kernels behind embedding, index_select, gather and
/// scatter_add and their backwards (core/ops/indexing.cpp).
///
/// Every array is dense and seen as [outer, size, inner], `size` being the length of the indexed
/// dimension. Indices are int64 and already checked by the op (0 <= index < size), so the kernels
/// never see a bad one. Adds are deterministic: each output element sums its contributions in one
/// fixed order, on every backend and at every thread count, with no atomics -- so training with an
/// embedding gives the same bits run after run.
///
/// Implemented by kernels/cpu/indexing.cpp and kernels/cuda/indexing.cu.
#pragma once

#include <cstdint>

#include <ringgrad/core/base/device.h>
#include <ringgrad/core/base/dtype.h>
#include <ringgrad/kernels/family.h>

namespace ringgrad {
namespace kernels {

/// A dense array seen as [outer, size, inner]: size is the indexed dimension's length, outer the
/// product of the dimensions before it, inner of those after it.
struct IndexLayout {
  int64_t outer = 1;  ///< product of the dimensions before the indexed one
  int64_t size = 1;   ///< length of the indexed dimension
  int64_t inner = 1;  ///< product of the dimensions after it
};

// [family]
/// The indexing kernels of one backend. Work is queued on `s` (kernels/backend.h's conventions).
struct IndexingKernels {
  static constexpr const char* kName = "indexing";
  virtual ~IndexingKernels() = default;

  /// y[o, j, i] = x[o, index[j], i] for j in [0, n): x is `x_layout`, y is [outer, n, inner].
  /// Any dtype (it copies).
  virtual void index_select(DType dt, const void* x, const IndexLayout& x_layout, const int64_t* index, int64_t n,
                            void* y, Stream s) const = 0;

  /// The backward of index_select, given the indices grouped by destination row (a counting sort, as
  /// CSR): row r received positions order[offsets[r]], ..., order[offsets[r + 1] - 1], in increasing
  /// order. dst[o, r, i] += src[o, order[k], i] for those k, in that order. dst is `dst_layout`, src
  /// is [outer, n, inner], offsets holds dst_layout.size + 1 entries. Floating dtypes.
  virtual void index_add(DType dt, const void* src, int64_t n, const int64_t* order, const int64_t* offsets, void* dst,
                         const IndexLayout& dst_layout, Stream s) const = 0;
  // [/family]

  /// y[o, j, i] = x[o, index[o, j, i], i]: index and y are [outer, n, inner], x is `x_layout`.
  /// Any dtype (it copies).
  virtual void gather(DType dt, const void* x, const IndexLayout& x_layout, const int64_t* index, int64_t n, void* y,
                      Stream s) const = 0;

  /// dst[o, index[o, j, i], i] += src[o, j, i] for j = 0, 1, ..., n - 1 in that order: index and src
  /// are [outer, n, inner], dst is `dst_layout`. Floating dtypes.
  virtual void scatter_add(DType dt, const void* src, const int64_t* index, int64_t n, void* dst,
                           const IndexLayout& dst_layout, Stream s) const = 0;
};

}  // namespace kernels
}  // namespace ringgrad
