// kernels/cpu/strided_loop.h: walks N strided arrays of one shape in lockstep, one innermost row at
// a time, so a kernel's inner loop sees plain pointers with a fixed stride.
//
// Before walking, the layout is simplified: size-1 dimensions are dropped, and neighbouring
// dimensions that every array steps through as one (outer stride == inner stride * inner size) are
// merged. A contiguous 4-d tensor becomes a single row of numel elements; a transposed matrix stays
// two-dimensional. The fewer and longer the rows, the more time is spent in the vectorisable part.
// for_each_row_in walks a sub-range of the elements, which is how a walk is split across threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <ringgrad/core/base/strided.h>

namespace ringgrad {
namespace kernels {
namespace cpu {

template <size_t N>
struct LockstepLayout {
  int ndim = 0;  // at least 1 after simplify_layout(), even for a single element
  int64_t shape[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};  // strides[k][d]: array k's stride along dimension d, in elements
};

// The simplified common layout of N arrays sharing `shape` (of `ndim` dimensions).
template <size_t N>
LockstepLayout<N> simplify_layout(int ndim, const int64_t* shape, const int64_t* const (&strides)[N]) {
  // Built innermost first, then reversed, because merging looks at the dimension just inside.
  LockstepLayout<N> rev;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;  // any stride will do for a dimension that is never stepped
    bool merges = rev.ndim > 0;
    for (size_t k = 0; k < N && merges; ++k) {
      const int last = rev.ndim - 1;
      merges = strides[k][d] == rev.strides[k][last] * rev.shape[last];
    }
    if (merges) {
      rev.shape[rev.ndim - 1] *= shape[d];
    } else {
      rev.shape[rev.ndim] = shape[d];
      for (size_t k = 0; k < N; ++k) rev.strides[k][rev.ndim] = strides[k][d];
      ++rev.ndim;
    }
  }
  LockstepLayout<N> out;
  if (rev.ndim == 0) {  // a scalar or all-ones shape: one row of one element
    out.ndim = 1;
    out.shape[0] = 1;
    return out;
  }
  out.ndim = rev.ndim;
  for (int d = 0; d < rev.ndim; ++d) {
    out.shape[d] = rev.shape[rev.ndim - 1 - d];
    for (size_t k = 0; k < N; ++k) out.strides[k][d] = rev.strides[k][rev.ndim - 1 - d];
  }
  return out;
}

// Calls row(offsets, inner_strides, n) once per innermost row: array k's row starts at element
// offsets[k] from its base and steps by inner_strides[k]. The outer dimensions advance like an
// odometer, so the walk costs O(1) per row and never divides.
template <size_t N, typename Row>
void for_each_row(const LockstepLayout<N>& layout, Row&& row) {
  const int last = layout.ndim - 1;
  const int64_t row_length = layout.shape[last];
  int64_t rows = 1;
  for (int d = 0; d < last; ++d) rows *= layout.shape[d];
  if (rows == 0 || row_length == 0) return;

  int64_t inner[N], offsets[N] = {};
  for (size_t k = 0; k < N; ++k) inner[k] = layout.strides[k][last];
  int64_t index[kMaxDims] = {};
  for (int64_t r = 0; r < rows; ++r) {
    row(static_cast<const int64_t*>(offsets), static_cast<const int64_t*>(inner), row_length);
    for (int d = last - 1; d >= 0; --d) {
      if (++index[d] < layout.shape[d]) {
        for (size_t k = 0; k < N; ++k) offsets[k] += layout.strides[k][d];
        break;
      }
      index[d] = 0;  // wrap this digit and carry into the next one out
      for (size_t k = 0; k < N; ++k) offsets[k] -= layout.strides[k][d] * (layout.shape[d] - 1);
    }
  }
}

// Like for_each_row, but only over elements [begin, end) of the layout's row-major order (the order
// of the original shape too: simplifying drops size-1 dimensions and merges neighbours, it never
// reorders). The first and last rows may be partial. This is how a strided walk is split across
// threads: each part takes a range, whatever the row length. Finding the first row costs one
// division per dimension; after that the walk is the odometer of for_each_row.
template <size_t N, typename Row>
void for_each_row_in(const LockstepLayout<N>& layout, int64_t begin, int64_t end, Row&& row) {
  const int last = layout.ndim - 1;
  const int64_t row_length = layout.shape[last];
  if (begin >= end || row_length == 0) return;

  int64_t inner[N], offsets[N] = {};
  for (size_t k = 0; k < N; ++k) inner[k] = layout.strides[k][last];
  int64_t index[kMaxDims] = {};
  int64_t column = begin % row_length;
  int64_t rest = begin / row_length;
  for (int d = last - 1; d >= 0; --d) {
    index[d] = rest % layout.shape[d];
    rest /= layout.shape[d];
    for (size_t k = 0; k < N; ++k) offsets[k] += index[d] * layout.strides[k][d];
  }
  for (int64_t remaining = end - begin;;) {
    const int64_t n = std::min(row_length - column, remaining);
    int64_t start[N];
    for (size_t k = 0; k < N; ++k) start[k] = offsets[k] + column * inner[k];
    row(static_cast<const int64_t*>(start), static_cast<const int64_t*>(inner), n);
    remaining -= n;
    if (remaining == 0) return;
    column = 0;
    for (int d = last - 1; d >= 0; --d) {
      if (++index[d] < layout.shape[d]) {
        for (size_t k = 0; k < N; ++k) offsets[k] += layout.strides[k][d];
        break;
      }
      index[d] = 0;
      for (size_t k = 0; k < N; ++k) offsets[k] -= layout.strides[k][d] * (layout.shape[d] - 1);
    }
  }
}

// Elements in a layout: rows times row length.
template <size_t N>
int64_t element_count(const LockstepLayout<N>& layout) {
  int64_t n = 1;
  for (int d = 0; d < layout.ndim; ++d) n *= layout.shape[d];
  return n;
}

// Strides of a dense row-major array of `shape`, for walking an output next to strided inputs.
inline void contiguous_strides(int ndim, const int64_t* shape, int64_t* strides) {
  int64_t step = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    strides[d] = step;
    step *= shape[d];
  }
}

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
