/// @file
/// core/base/strided.h: how a kernel sees a (possibly non-contiguous) array: a pointer plus sizes and
/// strides counted in elements. This is all a kernel knows of a tensor.
#pragma once

#include <cstdint>

namespace ringgrad {

constexpr int kMaxDims = 8;  ///< the most dimensions a tensor may have (Shape and the kernels agree)

/// A strided view as the kernels see it: a pointer to the first element, and up to kMaxDims sizes
/// and strides.
struct StridedDesc {
  void* data = nullptr;            ///< the first element
  int ndim = 0;                    ///< how many entries of shape and strides are used
  int64_t shape[kMaxDims] = {};    ///< sizes
  int64_t strides[kMaxDims] = {};  ///< in elements; 0 on a broadcast (expanded) dimension

  /// The number of elements.
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  /// True when the elements are dense in row-major order (dims of size 1 may have any stride).
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && strides[i] != expected) return false;
      expected *= shape[i];
    }
    return true;
  }
};

}  // namespace ringgrad
