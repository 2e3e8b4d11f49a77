// core/base/strided.h: how a kernel sees a (possibly non-contiguous) array: a pointer plus sizes and
// strides counted in elements. This is all a kernel knows of a tensor.
#pragma once

#include <cstdint>

namespace ringgrad {

constexpr int kMaxDims = 8;

struct StridedDesc {
  void* data = nullptr;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements; 0 on a broadcast (expanded) dimension

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
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
