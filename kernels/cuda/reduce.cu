// kernels/cuda/reduce.cu: sum and max/argmax over the middle axis of a dense [outer, r, inner] array,
// and scatter_add_dim (the backward of max).
//
// Budget : reads outer*r*inner elements (4 B each in float32), writes outer*inner values (+ 8 B of
//          index for argmax); one add or compare per element read: 0.25 FLOP/byte, memory-bound.
//          scatter_add_dim reads src and index (12 B) and read-modify-writes one dst element (8 B).
// Target : at least 80% of DRAM bandwidth (H200: 4.8 TB/s) once outer*r*inner >= 2^24 and there are
//          enough outputs to fill the chip (see the limitation below).
// Mapping: inner == 1 (reducing the last dimension): one warp per output, lanes stride along the
//          row (coalesced), then a butterfly of warp shuffles combines the 32 partials.
//          inner > 1: blocks of 32 x 8 threads; the 32 lanes of a row of threads own 32 adjacent
//          columns (coalesced loads along `inner`), the 8 rows split r between them, and the 8
//          partials per column are combined through shared memory.
// Precision: sums accumulate in double for every dtype, as on the CPU (H200 double adds are cheap,
//          and this kernel waits on memory anyway).
// Limitation: both mappings give each output to one warp or one block column, so a reduction to very
//          few outputs (say [1e7] -> []) runs on few SMs; a split-r second pass would fix that.
#include "kernels/cuda/reduce.h"

#include <cstdint>

#include "core/base/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/stride_loop.cuh"
#include "kernels/cuda/kernel_util.cuh"

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kColumnRows = 8;  // rows of threads splitting r in the column kernel
constexpr int64_t kNoIndex = INT64_MAX;

// A running maximum and the position it came from.
template <typename A>
struct Best {
  A value;
  int64_t index;
};

// Whether candidate (v, i) replaces `best`: NaN beats every number and propagates (as in PyTorch and
// the CPU backend), and among equal values -- or NaNs -- the smaller index wins ("first argmax"), so
// the result does not depend on which lane saw which element.
template <typename A>
__device__ inline bool takes(A v, int64_t i, const Best<A>& best) {
  const bool v_nan = v != v, best_nan = best.value != best.value;
  if (v_nan || best_nan) return v_nan && (!best_nan || i < best.index);
  return v > best.value || (v == best.value && i < best.index);
}

template <typename A>
__device__ inline Best<A> empty_best() {
  return Best<A>{-static_cast<A>(INFINITY), kNoIndex};
}

__device__ inline double warp_sum(double v) {
#pragma unroll
  for (int delta = kWarp / 2; delta > 0; delta /= 2) v += __shfl_xor_sync(0xffffffffu, v, delta);
  return v;
}

template <typename A>
__device__ inline Best<A> warp_max(Best<A> b) {
#pragma unroll
  for (int delta = kWarp / 2; delta > 0; delta /= 2) {
    const A v = __shfl_xor_sync(0xffffffffu, b.value, delta);
    const long long i = __shfl_xor_sync(0xffffffffu, static_cast<long long>(b.index), delta);
    if (takes(v, static_cast<int64_t>(i), b)) b = Best<A>{v, static_cast<int64_t>(i)};
  }
  return b;
}

// inner == 1: row `row` of x is x[row*r .. row*r + r); one warp per row.
template <typename T, bool kMax>
__global__ void reduce_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ indices,
                                   int64_t rows, int64_t r) {
  using A = acc_t<T>;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t warps = grid_threads() / kWarp;
  for (int64_t row = global_thread() / kWarp; row < rows; RG_STEP(row, warps)) {
    const T* xr = x + row * r;
    if constexpr (kMax) {
      Best<A> best = empty_best<A>();
      for (int64_t j = lane; j < r; RG_STEP(j, kWarp)) {
        const A v = load(&xr[j]);
        if (takes(v, j, best)) best = Best<A>{v, j};
      }
      best = warp_max(best);
      if (lane == 0) {
        y[row] = store_value<T>(best.value);
        if (indices != nullptr) indices[row] = best.index;
      }
    } else {
      double acc = 0.0;
      for (int64_t j = lane; j < r; RG_STEP(j, kWarp)) acc += static_cast<double>(load(&xr[j]));
      acc = warp_sum(acc);
      if (lane == 0) y[row] = convert<T>(acc);
    }
  }
}

// inner > 1: block (32, 8) covers columns [blockIdx.x*32, +32) of outer slices blockIdx.y, +gridDim.y, ...
template <typename T, bool kMax>
__global__ void reduce_columns_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ indices,
                                      int64_t outer, int64_t r, int64_t inner) {
  using A = acc_t<T>;
  __shared__ double sums[kColumnRows][kWarp];
  __shared__ A values[kColumnRows][kWarp];
  __shared__ int64_t positions[kColumnRows][kWarp];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarp + tx;
  const bool active = i < inner;
  for (int64_t o = blockIdx.y; o < outer; RG_STEP(o, gridDim.y)) {  // the same trip count for the whole block
    const T* xo = x + o * r * inner + i;
    if constexpr (kMax) {
      Best<A> best = empty_best<A>();
      if (active)
        for (int64_t j = ty; j < r; RG_STEP(j, kColumnRows)) {
          const A v = load(&xo[j * inner]);
          if (takes(v, j, best)) best = Best<A>{v, j};
        }
      values[ty][tx] = best.value;
      positions[ty][tx] = best.index;
    } else {
      double acc = 0.0;
      if (active)
        for (int64_t j = ty; j < r; RG_STEP(j, kColumnRows)) acc += static_cast<double>(load(&xo[j * inner]));
      sums[ty][tx] = acc;
    }
    __syncthreads();
    if (ty == 0 && active) {
      if constexpr (kMax) {
        Best<A> best{values[0][tx], positions[0][tx]};
        for (int k = 1; k < kColumnRows; ++k)
          if (takes(values[k][tx], positions[k][tx], best)) best = Best<A>{values[k][tx], positions[k][tx]};
        y[o * inner + i] = store_value<T>(best.value);
        if (indices != nullptr) indices[o * inner + i] = best.index;
      } else {
        double acc = 0.0;
        for (int k = 0; k < kColumnRows; ++k) acc += sums[k][tx];
        y[o * inner + i] = convert<T>(acc);
      }
    }
    __syncthreads();  // the shared arrays are rewritten for the next slice
  }
}

template <typename T>
__global__ void scatter_add_dim_kernel(const T* __restrict__ src, const int64_t* __restrict__ index,
                                       T* __restrict__ dst, int64_t outer, int64_t r, int64_t inner) {
  // Distinct (o, i) write distinct dst elements, so no atomics are needed.
  const int64_t n = outer * inner;
  for (int64_t k = global_thread(); k < n; RG_STEP(k, grid_threads())) {
    const int64_t o = k / inner, i = k - o * inner;
    const int64_t j = index[k];
    if (j < 0 || j >= r) continue;
    T* d = dst + (o * r + j) * inner + i;
    *d = store_value<T>(load(d) + load(&src[k]));
  }
}

template <typename T, bool kMax>
void launch_reduce(const T* x, T* y, int64_t* indices, int64_t outer, int64_t r, int64_t inner, cudaStream_t stream) {
  if (inner == 1) {
    launch_kernel("reduce_rows_kernel", reduce_rows_kernel<T, kMax>, blocks_for(outer * kWarp), kThreads, 0, stream, x,
                  y, indices, outer, r);
  } else {
    const dim3 block(kWarp, kColumnRows);
    const dim3 grid(static_cast<unsigned>((inner + kWarp - 1) / kWarp),
                    static_cast<unsigned>(std::min<int64_t>(outer, current_device_limits().max_grid[1])));
    launch_kernel("reduce_columns_kernel", reduce_columns_kernel<T, kMax>, grid, block, 0, stream, x, y, indices, outer,
                  r, inner);
  }
}

}  // namespace

void reduce(ReduceOp op, DType dt, const void* x, void* y, int64_t* indices, int64_t outer, int64_t r, int64_t inner,
            cudaStream_t stream) {
  if (outer * inner == 0) return;
  RINGGRAD_CHECK((inner + kWarp - 1) / kWarp <= INT32_MAX, "reduce: inner size ", inner, " is too large");
  if (op == ReduceOp::Max)
    RINGGRAD_CHECK(r > 0, "reduce: max over an empty dimension has no value; expected a dimension of size >= 1, got 0");
  dispatch_floating<true>("reduce", dt, [&](auto zero) {
    using T = decltype(zero);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    if (op == ReduceOp::Sum) {
      launch_reduce<T, false>(xs, ys, nullptr, outer, r, inner, stream);
    } else {
      launch_reduce<T, true>(xs, ys, indices, outer, r, inner, stream);
    }
  });
}

void scatter_add_dim(DType dt, const void* src, const int64_t* index, void* dst, int64_t outer, int64_t r,
                     int64_t inner, cudaStream_t stream) {
  const int64_t n = outer * inner;
  if (n == 0) return;
  dispatch_floating<true>("scatter_add_dim", dt, [&](auto zero) {
    using T = decltype(zero);
    launch_kernel("scatter_add_dim_kernel", scatter_add_dim_kernel<T>, blocks_for(n), kThreads, 0, stream,
                  static_cast<const T*>(src), index, static_cast<T*>(dst), outer, r, inner);
  });
}

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
