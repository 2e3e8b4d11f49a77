// kernels/cpu/reduce.cpp: sum and max over the middle axis of a dense [outer, r, inner] array, and
// scatter_add_dim, the backward of max.
//
// Any reduction over one dimension of a contiguous tensor has this shape: dimensions before it
// multiply into `outer`, those after it into `inner`. Budget: reads outer*r*inner elements, writes
// outer*inner; one add or compare each -- memory-bound.
//
// Sums accumulate in double, also for float32: a float accumulator over a million elements loses
// about three decimal digits, a double one loses none that float can show. Two loop shapes:
//   inner == 1  each output is a contiguous row: eight independent partial sums, which the
//               compiler keeps in vector registers;
//   inner >  1  the output is a row of `inner` columns: a tile of up to kTile columns is summed
//               down the r rows into a stack array, so the inner loop is unit-stride and vectorises.
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"

namespace ringgrad {
namespace kernels {
namespace {

constexpr int64_t kTile = 256;  // columns per tile: 2 KiB of double accumulators, well inside L1

template <typename T>
double sum_row(const T* x, int64_t n) {
  double part[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int lane = 0; lane < 8; ++lane) part[lane] += static_cast<double>(x[j + lane]);
  for (; j < n; ++j) part[0] += static_cast<double>(x[j]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

template <typename T>
void sum_middle(const T* x, T* y, int64_t outer, int64_t r, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    const T* xo = x + o * r * inner;
    T* yo = y + o * inner;
    if (inner == 1) {
      yo[0] = static_cast<T>(sum_row(xo, r));
      continue;
    }
    for (int64_t i0 = 0; i0 < inner; i0 += kTile) {
      const int64_t width = inner - i0 < kTile ? inner - i0 : kTile;
      double acc[kTile];  // only the first `width` entries are used, so only they are zeroed
      for (int64_t t = 0; t < width; ++t) acc[t] = 0.0;
      for (int64_t j = 0; j < r; ++j) {
        const T* row = xo + j * inner + i0;
        for (int64_t t = 0; t < width; ++t) acc[t] += static_cast<double>(row[t]);
      }
      for (int64_t t = 0; t < width; ++t) yo[i0 + t] = static_cast<T>(acc[t]);
    }
  }
}

// v replaces the running best when larger, or when it is the first NaN: NaN propagates, as in
// PyTorch, and ties keep the earlier index ("first argmax").
template <typename T>
inline bool beats(T v, T best) {
  return v > best || (v != v && best == best);
}

// kIndices: whether argmax indices are written. A template flag, so the common loop has no test.
template <typename T, bool kIndices>
void max_middle(const T* x, T* y, int64_t* indices, int64_t outer, int64_t r, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    const T* xo = x + o * r * inner;
    T* yo = y + o * inner;
    for (int64_t i = 0; i < inner; ++i) yo[i] = xo[i];
    if constexpr (kIndices)
      for (int64_t i = 0; i < inner; ++i) indices[o * inner + i] = 0;
    for (int64_t j = 1; j < r; ++j) {
      const T* row = xo + j * inner;
      for (int64_t i = 0; i < inner; ++i) {
        if (beats(row[i], yo[i])) {
          yo[i] = row[i];
          if constexpr (kIndices) indices[o * inner + i] = j;
        }
      }
    }
  }
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, DType dt, const void* x, void* y, int64_t* indices, int64_t outer, int64_t r,
                        int64_t inner, Stream) {
  cpu::dispatch_floating("reduce", dt, [&](auto zero) {
    using T = decltype(zero);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    if (op == ReduceOp::Sum) return sum_middle(xs, ys, outer, r, inner);
    RINGGRAD_CHECK(r > 0 || outer * inner == 0,
                   "reduce: max over an empty dimension has no value; expected a dimension of size >= 1, got 0");
    if (indices != nullptr) {
      max_middle<T, true>(xs, ys, indices, outer, r, inner);
    } else {
      max_middle<T, false>(xs, ys, indices, outer, r, inner);
    }
  });
}

void CpuBackend::scatter_add_dim(DType dt, const void* src, const int64_t* index, void* dst, int64_t outer, int64_t r,
                                 int64_t inner, Stream) {
  cpu::dispatch_floating("scatter_add_dim", dt, [&](auto zero) {
    using T = decltype(zero);
    const T* s = static_cast<const T*>(src);
    T* d = static_cast<T*>(dst);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t j = index[o * inner + i];
        RINGGRAD_CHECK(j >= 0 && j < r, "scatter_add_dim: expected an index in [0, ", r, "), got ", j, " at position [",
                       o, ", ", i, "]");
        d[(o * r + j) * inner + i] += s[o * inner + i];
      }
    }
  });
}

}  // namespace kernels
}  // namespace ringgrad
