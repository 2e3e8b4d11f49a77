// kernels/cpu/sum_lanes.h: a chunk's sum in its own precision, the same bits at every vector width.
//
// A chunk of n <= kSumChunk elements is summed in 256 bytes of lanes (64 floats or 32 doubles):
// lane l adds x[l], x[l + L], x[l + 2L], ... in that order, starting from 0; then the lanes are
// folded by a fixed pairwise tree (lane l += lane l + L/2 for l < L/2, then L/4, ... down to one).
// SSE holds the lanes in 16 registers, AVX2 in 8, AVX-512 in 4; the tree's first levels add whole
// registers, its last ones halves of one. Each width performs exactly the same roundings, so the
// result does not depend on the vector level. No FMA and no reassociation are involved: GCC vector
// extensions add lane by lane under IEEE rules, as scalar code does.
//
// Error bound (float32, u = 2^-24). A lane adds at most kSumChunk / 64 = 16 elements (the first
// addition, to 0, is exact) and the tree adds 6 levels, so each element passes through at most
// 15 + 6 = 21 roundings, and the chunk's float sum c satisfies (Higham, Accuracy and Stability of
// Numerical Algorithms, 2nd ed., sec. 4.2) |c - sum x| <= gamma_21 sum |x|, gamma_k = k u / (1 - k u).
// sum_chunks adds the chunk sums in double, and reduce.cpp adds those of each block of 64 chunks and
// then the block sums in double: below 2^40 elements at most 63 + 2^24 double additions, a relative
// 2^-29 = u / 32. The result is rounded to float once. Together, s the exact sum:
//     |result - s| <= u |s| + 22 u sum |x|      (about 1.3e-6 sum |x|; n < 2^40)
// tests/kernels/test_cpu_sum.cpp checks it against a long-double sum. The double accumulator this
// replaced was about u |s|. The difference shows most where the terms cancel (|s| << sum |x|); for
// terms of one sign it is at most 23 u relative, and a constant row, whose chunks all round alike,
// is the worst common case (a million copies of 0.1f: 1.9 u). For float64 input the same scheme
// runs in double, 32 lanes of 32 terms: gamma_36 in units of 2^-53.
//
// Why a header with an anonymous namespace: sum_chunks.cpp, _avx2.cpp and _avx512.cpp each compile
// it at their own width; internal linkage keeps the linker from mixing the copies (isa.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/sum_chunks.h"

namespace ringgrad {
namespace kernels {
namespace cpu {
namespace {

// The lanes fill 256 bytes: 16 SSE, 8 AVX2 or 4 AVX-512 registers, enough independent add chains
// to keep up with L2 at every width (add latency 3-4 cycles, two adds a cycle).
constexpr size_t kLanesBytes = 256;

// GCC vector types: the attribute cannot take a template's T, so each pair is spelled out. The
// narrow ones serve the fold, which halves a vector until one element is left.
template <typename T, int kBytes>
struct VectorOf;
#define RINGGRAD_VECTOR_OF(T, kBytes)                    \
  template <>                                            \
  struct VectorOf<T, kBytes> {                           \
    typedef T type __attribute__((vector_size(kBytes))); \
  };
RINGGRAD_VECTOR_OF(float, 8)
RINGGRAD_VECTOR_OF(float, 16)
RINGGRAD_VECTOR_OF(float, 32)
RINGGRAD_VECTOR_OF(float, 64)
RINGGRAD_VECTOR_OF(double, 16)
RINGGRAD_VECTOR_OF(double, 32)
RINGGRAD_VECTOR_OF(double, 64)
#undef RINGGRAD_VECTOR_OF

// The last levels of the tree, inside one vector: lane l += lane l + width/2, down to one lane.
// (GCC turns the half-vector copies into register extracts, not memory traffic.)
template <typename T, int kBytes>
T fold_vector(const typename VectorOf<T, kBytes>::type& v) {
  if constexpr (kBytes == 2 * static_cast<int>(sizeof(T))) {
    return v[0] + v[1];
  } else {
    using Half = typename VectorOf<T, kBytes / 2>::type;
    Half low, high;
    __builtin_memcpy(&low, &v, sizeof low);
    __builtin_memcpy(&high, reinterpret_cast<const char*>(&v) + sizeof low, sizeof high);
    return fold_vector<T, kBytes / 2>(low + high);
  }
}

// The sum of x[0 .. n), n <= kSumChunk, in T: kLanesBytes / sizeof(T) lanes and the pairwise tree.
template <typename T, int kVectorBytes>
T sum_lanes(const T* x, int64_t n) {
  using Vec = typename VectorOf<T, kVectorBytes>::type;
  constexpr size_t kLanes = kLanesBytes / sizeof(T);
  constexpr size_t kWidth = kVectorBytes / sizeof(T);
  constexpr size_t kVectors = kLanes / kWidth;
  Vec acc[kVectors];
  for (Vec& a : acc) a = Vec{};
  int64_t j = 0;
  for (; j + static_cast<int64_t>(kLanes) <= n; j += static_cast<int64_t>(kLanes)) {
#pragma GCC unroll 16
    for (size_t k = 0; k < kVectors; ++k) {
      Vec v;
      __builtin_memcpy(&v, x + j + k * kWidth, sizeof v);  // an unaligned load
      acc[k] += v;
    }
  }
  if (j < n) {  // the tail continues lanes 0, 1, ... (only a row's last, partial chunk has one)
    T lane[kLanes];
    __builtin_memcpy(lane, acc, sizeof lane);
    for (int64_t t = 0; j + t < n; ++t) lane[t] += x[j + t];
    __builtin_memcpy(acc, lane, sizeof lane);
  }
  // The tree's first levels pair whole vectors (lane l with l + kLanes/2 is vector k with
  // k + kVectors/2), the last ones halve a single vector.
  for (size_t half = kVectors / 2; half >= 1; half /= 2)
    for (size_t k = 0; k < half; ++k) acc[k] += acc[k + half];
  return fold_vector<T, kVectorBytes>(acc[0]);
}

// Chunk sums of x[0 .. n), each in T, added in order into a double (see sum_chunks.h).
template <typename T, int kVectorBytes>
double sum_chunks_at(const T* x, int64_t n) {
  double total = 0.0;
  for (int64_t c = 0; c < n; c += kSumChunk)
    total += static_cast<double>(sum_lanes<T, kVectorBytes>(x + c, n - c < kSumChunk ? n - c : kSumChunk));
  return total;
}

}  // namespace
}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
