/// @file
/// core/shape.h: Shape, a small fixed-capacity list of dimension sizes (or strides).
///
/// A tensor's shape and strides are read on every op call. Keeping them inline (no heap allocation)
/// removes two mallocs per tensor, which is a large share of the cost of a tiny op: see the dispatch
/// numbers in docs/benchmarks.md. kMaxDims comes from the kernel interface, which uses the same limit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <climits>
#include <initializer_list>
#include <ostream>
#include <vector>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/base/strided.h>

namespace ringgrad {

class Shape;
inline std::ostream& operator<<(std::ostream& os, const Shape& s);

/// The sizes (or strides) of a tensor: at most kMaxDims int64 values stored inline, so copying a
/// Shape never allocates. Prints as [2, 3].
class Shape {
 public:
  Shape() = default;  ///< no dimensions: the shape of a scalar
  Shape(std::initializer_list<int64_t> dims) : Shape(dims.begin(), dims.end()) {}  ///< Shape{2, 3}
  /// From a std::vector (implicit, so vectors pass where a Shape is expected).
  Shape(const std::vector<int64_t>& dims) : Shape(dims.begin(), dims.end()) {}  // NOLINT: implicit on purpose
  /// From any range of integers; throws past kMaxDims values.
  template <typename It>
  Shape(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }

  ///@{
  /// The std::vector-like accessors (unchecked indices, as std::vector's operator[]).
  int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](int64_t i) { return d_[i]; }
  int64_t operator[](int64_t i) const { return d_[i]; }
  int64_t back() const { return d_[n_ - 1]; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  const int64_t* data() const { return d_; }
  ///@}

  /// Appends a size; throws ringgrad::Error past kMaxDims dimensions.
  void push_back(int64_t v) {
    RINGGRAD_CHECK(n_ < kMaxDims, "Shape: at most ", kMaxDims, " dimensions are supported, got more");
    d_[n_++] = v;
  }
  /// Inserts v before position pos (0 <= pos <= size()); throws past kMaxDims dimensions.
  void insert(int64_t pos, int64_t v) {
    push_back(0);
    std::copy_backward(d_ + pos, d_ + n_ - 1, d_ + n_);
    d_[pos] = v;
  }
  /// Removes the value at position pos (0 <= pos < size()).
  void erase(int64_t pos) {
    std::copy(d_ + pos + 1, d_ + n_, d_ + pos);
    --n_;
  }

  /// Product of the sizes: the number of elements. The empty shape (a scalar) has one.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t i = 0; i < n_; ++i)
      RINGGRAD_CHECK(!__builtin_mul_overflow(n, d_[i], &n), "Shape: the sizes ", *this,
                     " multiply to more than "
                     "int64 can hold");
    return n;
  }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }  ///< a std::vector copy

  /// Same number of dimensions and the same values.
  friend bool operator==(const Shape& a, const Shape& b) {
    return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }  ///< !(a == b)

 private:
  int64_t d_[kMaxDims] = {};
  int64_t n_ = 0;
};

/// Prints [2, 3] (PyTorch's way of printing sizes).
inline std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (int64_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

/// Row-major (C-order) strides for a shape: the last dimension is contiguous. Sizes of 0 count as 1
/// (as in PyTorch); an empty tensor's strides are never used to address memory, so where its
/// other sizes would overflow int64 the stride saturates instead.
inline Shape contiguous_strides(const Shape& shape) {
  Shape strides = shape;
  int64_t stride = 1;
  for (int64_t i = shape.size() - 1; i >= 0; --i) {
    strides[i] = stride;
    if (__builtin_mul_overflow(stride, std::max<int64_t>(shape[i], 1), &stride)) stride = INT64_MAX;
  }
  return strides;
}

}  // namespace ringgrad
