// kernels/cpu/reduce.cpp: sum and max over the middle axis of a dense [outer, r, inner] array, and
// scatter_add_dim, the backward of max.
//
// Any reduction over one dimension of a contiguous tensor has this shape: dimensions before it
// multiply into `outer`, those after it into `inner`. Budget: reads outer*r*inner elements, writes
// outer*inner; one add or compare each -- memory-bound.
//
// Sums: the same bits on any thread count and any vector level. Every row sum -- a full sum is one
// long row, sum over dim 1 of a matrix is one row per output -- is cut at FIXED boundaries, a
// function of the row length alone: chunks of kSumChunk (1024) elements, each summed in float
// (float32) in 64 lanes and a pairwise tree (sum_lanes.h, which derives the error bound:
// |result - s| <= 2^-24 |s| + 22 * 2^-24 * sum |x|), chunk sums added in double in chunk order
// within blocks of kSumBlock chunks, and the block sums added in double in block order on the
// calling thread. Threads split a lone row by whole blocks and a matrix by rows, so one thread or
// three perform the same additions in the same order. sum over a [1, n] and a [4, n] tensor agree
// row by row. The chunk loop is compiled for SSE, AVX2 and AVX-512 (sum_chunks_*.cpp) and picked
// by cpu_isa(); all three give the same bits (sum_lanes.h says why).
//
// Why float lanes and not a double accumulator (what this file did before): converting every float
// to double halves the elements per instruction, and the 8-lane double chain was bound by add
// latency, not memory. One thread, float32, Intel Xeon (Sapphire Rapids), other builds running:
//   bench_elementwise --no-torch --ops sum,sum_dim1 --threads 1 --reps 7
//       --sizes 262144,1048576,4194304,16777216          (median of 3 runs, GB/s, before -> after)
//   sum       256K 17.8 -> 55.1   1M 13.2 -> 13.6   4M  9.7 -> 13.4   16M 3.9 -> 8.7
//   sum_dim1  256K 10.5 -> 42.5   1M  8.8 -> 11.9   4M  6.3 -> 13.1   16M 4.0 -> 8.3
// At 256K (in L2) the vector level matters: SSE 50, AVX2 90, AVX-512 94-106 GB/s in a quieter
// moment (RINGGRAD_CPU_ISA=baseline|avx2|avx512). From 1M on one core reads L3 at about 26 GB/s,
// whichever level. docs/benchmarks.md has the two-thread runs against PyTorch.
//
// inner > 1 (sum over a dimension that is not the last): a tile of up to kTile columns is summed
// down the r rows into a stack array of doubles, so the inner loop is unit-stride and vectorises;
// each column is one sequential double sum, whatever the split.
//
// Max needs no such care (it is exact), but keeps the first maximum's index: chunk maxima are
// combined in chunk order with the same comparison as within a chunk.
//
// Not split: inner > 1 with a single tile of columns per outer row and one outer row (say a
// [8M, 2] tensor summed over dim 0); its tile is summed down all r rows on one thread.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/sum_chunks.h"
#include "kernels/cpu/thread_pool.h"

namespace ringgrad {
namespace kernels {
namespace {

constexpr int64_t kTile = 256;  // columns per tile: 2 KiB of double accumulators, well inside L1

// Chunks per block: a lone row is split across threads by blocks of 64 Ki elements, the least work
// worth a thread's wake-up (thread_pool.h's kGrain).
constexpr int64_t kSumBlock = 64;
constexpr int64_t kBlockLength = kSumBlock * cpu::kSumChunk;
static_assert(kBlockLength == cpu::kGrain, "a block is one grain of work");

// Max's lone rows are still cut into chunks of 16 Ki elements, more when that would make over
// kMaxChunks chunks (their maxima then fit a stack array); max is exact, so the length is free.
constexpr int64_t kMaxChunk = 1 << 14;
constexpr int64_t kMaxChunks = 4096;

int64_t max_chunk_length(int64_t r) {
  const int64_t at_least = (r + kMaxChunks - 1) / kMaxChunks;
  return std::max(kMaxChunk, (at_least + 7) / 8 * 8);
}

// The chunk loop of this CPU's vector level (sum_chunks.h), chosen once.
template <typename T>
double sum_chunks(const T* x, int64_t n) {
  using Fn = double (*)(const T*, int64_t);
  static const Fn fn = [] {
    switch (cpu::cpu_isa()) {
      case cpu::Isa::avx512: return static_cast<Fn>(cpu::sum_chunks_avx512);
      case cpu::Isa::avx2: return static_cast<Fn>(cpu::sum_chunks_avx2);
      case cpu::Isa::baseline: break;
    }
    return static_cast<Fn>(cpu::sum_chunks_baseline);
  }();
  return fn(x, n);
}

// The sum of a row of r elements: block sums (sum_chunks over kBlockLength elements each) added in
// block order. `threaded`: blocks may be summed on several threads (only for a lone row; rows of a
// matrix are already spread over threads). Kernels never allocate, so a row of more than
// kOnStack blocks is taken kOnStack blocks at a time; the additions into `total` stay in order.
template <typename T>
double sum_row(const T* x, int64_t r, bool threaded) {
  if (r <= kBlockLength) return sum_chunks(x, r);
  const int64_t blocks = (r + kBlockLength - 1) / kBlockLength;
  constexpr int64_t kOnStack = 1024;  // 8 KiB of block sums: 64 Mi elements
  double partial[kOnStack];
  double total = 0.0;  // 0 + partial[0] is partial[0]: the same additions as starting from it
  for (int64_t first = 0; first < blocks; first += kOnStack) {
    const int64_t count = std::min(kOnStack, blocks - first);
    auto sum_blocks = [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t start = (first + b) * kBlockLength;
        partial[b] = sum_chunks(x + start, std::min(kBlockLength, r - start));
      }
    };
    if (threaded)
      cpu::parallel_range(count, 1, sum_blocks);
    else
      sum_blocks(0, count);
    for (int64_t b = 0; b < count; ++b) total += partial[b];
  }
  return total;
}

// The tile of outer row o that starts at column i0 (up to kTile columns), summed down the r rows.
template <typename T>
void sum_tile(const T* x, T* y, int64_t r, int64_t inner, int64_t o, int64_t i0) {
  const int64_t width = std::min(kTile, inner - i0);
  const T* xo = x + o * r * inner;
  double acc[kTile];  // only the first `width` entries are used, so only they are zeroed
  for (int64_t t = 0; t < width; ++t) acc[t] = 0.0;
  for (int64_t j = 0; j < r; ++j) {
    const T* row = xo + j * inner + i0;
    for (int64_t t = 0; t < width; ++t) acc[t] += static_cast<double>(row[t]);
  }
  for (int64_t t = 0; t < width; ++t) y[o * inner + i0 + t] = static_cast<T>(acc[t]);
}

template <typename T>
void sum_middle(const T* x, T* y, int64_t outer, int64_t r, int64_t inner) {
  if (inner == 1) {
    if (outer == 1) {
      y[0] = static_cast<T>(sum_row(x, r, true));
      return;
    }
    cpu::parallel_range(outer, std::max<int64_t>(1, cpu::kGrain / std::max<int64_t>(r, 1)),
                        [&](int64_t begin, int64_t end) {
                          for (int64_t o = begin; o < end; ++o) y[o] = static_cast<T>(sum_row(x + o * r, r, false));
                        });
    return;
  }
  const int64_t tiles_per_row = (inner + kTile - 1) / kTile;
  cpu::parallel_range(outer * tiles_per_row, std::max<int64_t>(1, cpu::kGrain / std::max<int64_t>(r * kTile, 1)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t tile = begin; tile < end; ++tile)
                          sum_tile(x, y, r, inner, tile / tiles_per_row, tile % tiles_per_row * kTile);
                      });
}

// v replaces the running best when larger, or when it is the first NaN: NaN propagates, as in
// PyTorch, and ties keep the earlier index ("first argmax").
template <typename T>
inline bool beats(T v, T best) {
  return v > best || (v != v && best == best);
}

// The maximum of x[0 .. n) and the index of its first occurrence.
template <typename T>
void max_row(const T* x, int64_t n, T& best, int64_t& at) {
  best = x[0];
  at = 0;
  for (int64_t j = 1; j < n; ++j) {
    if (beats(x[j], best)) {
      best = x[j];
      at = j;
    }
  }
}

// A lone row (outer == 1 && inner == 1): chunk maxima, combined in chunk order.
template <typename T>
void max_chunked(const T* x, int64_t r, T& best, int64_t& at) {
  const int64_t chunk = max_chunk_length(r);
  if (r <= chunk) return max_row(x, r, best, at);
  const int64_t chunks = (r + chunk - 1) / chunk;
  T chunk_best[kMaxChunks];
  int64_t chunk_at[kMaxChunks];
  cpu::parallel_range(chunks, std::max<int64_t>(1, cpu::kGrain / chunk), [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      max_row(x + k * chunk, std::min(chunk, r - k * chunk), chunk_best[k], chunk_at[k]);
      chunk_at[k] += k * chunk;
    }
  });
  best = x[0];  // chunk 0's maximum replaces it unless they are equal (or both NaN): the same result
  at = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    if (beats(chunk_best[k], best)) {
      best = chunk_best[k];
      at = chunk_at[k];
    }
  }
}

// Columns [i0, i1) of outer row o, reduced down r rows. kIndices: whether argmax indices are
// written. A template flag, so the common loop has no test.
template <typename T, bool kIndices>
void max_columns(const T* x, T* y, int64_t* indices, int64_t r, int64_t inner, int64_t o, int64_t i0, int64_t i1) {
  const T* xo = x + o * r * inner;
  T* yo = y + o * inner;
  for (int64_t i = i0; i < i1; ++i) yo[i] = xo[i];
  if constexpr (kIndices)
    for (int64_t i = i0; i < i1; ++i) indices[o * inner + i] = 0;
  for (int64_t j = 1; j < r; ++j) {
    const T* row = xo + j * inner;
    for (int64_t i = i0; i < i1; ++i) {
      if (beats(row[i], yo[i])) {
        yo[i] = row[i];
        if constexpr (kIndices) indices[o * inner + i] = j;
      }
    }
  }
}

template <typename T, bool kIndices>
void max_middle(const T* x, T* y, int64_t* indices, int64_t outer, int64_t r, int64_t inner) {
  if (outer * inner == 0) return;
  if (outer == 1 && inner == 1) {
    int64_t at = 0;
    max_chunked(x, r, y[0], at);
    if constexpr (kIndices) indices[0] = at;
    return;
  }
  if (outer == 1) {  // one row of columns: split the columns
    cpu::parallel_range(
        inner, std::max<int64_t>(1, cpu::kGrain / std::max<int64_t>(r, 1)),
        [&](int64_t begin, int64_t end) { max_columns<T, kIndices>(x, y, indices, r, inner, 0, begin, end); });
    return;
  }
  cpu::parallel_range(outer, std::max<int64_t>(1, cpu::kGrain / std::max<int64_t>(r * inner, 1)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t o = begin; o < end; ++o)
                          max_columns<T, kIndices>(x, y, indices, r, inner, o, 0, inner);
                      });
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
