// kernels/cuda/softmax.cu: softmax / log_softmax over the middle axis of [outer, c, inner], forward and
// backward, and the fused softmax-cross-entropy on [rows, c] logits with label smoothing.
//
// Budget (float32): forward reads x (4 B) and writes y (4 B) per element, with one exp and ~5 FLOPs:
//          ~1 FLOP/byte with exp counted as a few, far below the H200's ~14 FLOP/byte balance point,
//          so memory-bound. The row is read three times (max, sum, write) but a warp's row of up to
//          a few thousand floats stays in L1/L2, so DRAM sees it once.
//          backward reads y, dy (8 B), writes dx (4 B). cross_entropy_forward reads the logits
//          (4 B/element) and writes probs (4 B/element) plus one loss per row; its backward reads
//          probs and writes dlogits (8 B/element).
// Target : at least 80% of DRAM bandwidth (H200: 4.8 TB/s) once the array has >= 2^24 elements.
// Mapping: inner == 1 (softmax over the last dimension, and every cross-entropy row): one warp per
//          row, lanes striding along it (coalesced), warp shuffles for the max and the sums.
//          inner > 1: one thread per (outer, inner) column looping over c; adjacent threads own
//          adjacent columns, so each of the c loads is coalesced.
// Stability and precision follow kernels/cpu/softmax.cpp: the row max is subtracted before exp,
//          log_softmax is x - (max + log sum), never log(softmax); sums accumulate in double.
#include "kernels/cuda/softmax.h"

#include <math.h>

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

__device__ inline float d_exp(float x) { return expf(x); }
__device__ inline double d_exp(double x) { return exp(x); }

// std::max(m, v) of the CPU: keeps m unless m < v, so a NaN x is skipped by the max (and then
// poisons the sum, as it should).
template <typename A>
__device__ inline A running_max(A m, A v) {
  return m < v ? v : m;
}

__device__ inline double warp_sum(double v) {
#pragma unroll
  for (int delta = kWarp / 2; delta > 0; delta /= 2) v += __shfl_xor_sync(0xffffffffu, v, delta);
  return v;
}

template <typename A>
__device__ inline A warp_max(A v) {
#pragma unroll
  for (int delta = kWarp / 2; delta > 0; delta /= 2) v = running_max(v, __shfl_xor_sync(0xffffffffu, v, delta));
  return v;
}

// Element j of the softmax "row" that starts at `base` with stride `inner`.
#define RG_AT(ptr, j) (ptr)[base + (j)*inner]

// Forward for one row/column; `lane`/`lanes` split the c elements (lanes == 1 in the column kernel).
// The reductions go through `combine_max`/`combine_sum`, which are warp-wide or the identity.
template <typename T, typename MaxAll, typename SumAll>
__device__ inline void softmax_line(const T* __restrict__ x, T* __restrict__ y, int64_t base, int64_t c, int64_t inner,
                                    int lane, int lanes, bool log, MaxAll max_all, SumAll sum_all) {
  using A = acc_t<T>;
  A m = -static_cast<A>(INFINITY);
  for (int64_t j = lane; j < c; RG_STEP(j, lanes)) m = running_max(m, load(&RG_AT(x, j)));
  m = max_all(m);
  double sum = 0.0;
  for (int64_t j = lane; j < c; RG_STEP(j, lanes)) sum += static_cast<double>(d_exp(load(&RG_AT(x, j)) - m));
  sum = sum_all(sum);
  if (log) {
    const A log_sum_exp = m + static_cast<A>(::log(sum));
    for (int64_t j = lane; j < c; RG_STEP(j, lanes)) RG_AT(y, j) = store_value<T>(load(&RG_AT(x, j)) - log_sum_exp);
  } else {
    const A inv_sum = static_cast<A>(1.0 / sum);
    for (int64_t j = lane; j < c; RG_STEP(j, lanes))
      RG_AT(y, j) = store_value<T>(d_exp(load(&RG_AT(x, j)) - m) * inv_sum);
  }
}

// softmax: dx = y (dy - sum dy y);  log_softmax: dx = dy - e^y sum dy.
template <typename T, typename SumAll>
__device__ inline void softmax_backward_line(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                             int64_t base, int64_t c, int64_t inner, int lane, int lanes, bool log,
                                             SumAll sum_all) {
  using A = acc_t<T>;
  double acc = 0.0;
  if (log) {
    for (int64_t j = lane; j < c; RG_STEP(j, lanes)) acc += static_cast<double>(load(&RG_AT(dy, j)));
  } else {
    for (int64_t j = lane; j < c; RG_STEP(j, lanes))
      acc += static_cast<double>(load(&RG_AT(dy, j))) * static_cast<double>(load(&RG_AT(y, j)));
  }
  const A total = static_cast<A>(sum_all(acc));
  for (int64_t j = lane; j < c; RG_STEP(j, lanes)) {
    const A yj = load(&RG_AT(y, j)), gj = load(&RG_AT(dy, j));
    RG_AT(dx, j) = store_value<T>(log ? gj - d_exp(yj) * total : yj * (gj - total));
  }
}

#undef RG_AT

struct WarpMax {
  template <typename A>
  __device__ A operator()(A v) const {
    return warp_max(v);
  }
};
struct WarpSum {
  __device__ double operator()(double v) const { return warp_sum(v); }
};
struct Identity {
  template <typename A>
  __device__ A operator()(A v) const {
    return v;
  }
};

template <typename T>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t c, bool log) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t row = global_thread() / kWarp; row < rows; RG_STEP(row, grid_threads() / kWarp))
    softmax_line(x, y, row * c, c, 1, lane, kWarp, log, WarpMax{}, WarpSum{});
}

template <typename T>
__global__ void softmax_columns_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t c,
                                       int64_t inner, bool log) {
  for (int64_t k = global_thread(); k < outer * inner; RG_STEP(k, grid_threads())) {
    const int64_t o = k / inner, i = k - o * inner;
    softmax_line(x, y, o * c * inner + i, c, inner, 0, 1, log, Identity{}, Identity{});
  }
}

template <typename T>
__global__ void softmax_backward_rows_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                             int64_t rows, int64_t c, bool log) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t row = global_thread() / kWarp; row < rows; RG_STEP(row, grid_threads() / kWarp))
    softmax_backward_line(y, dy, dx, row * c, c, 1, lane, kWarp, log, WarpSum{});
}

template <typename T>
__global__ void softmax_backward_columns_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                                int64_t outer, int64_t c, int64_t inner, bool log) {
  for (int64_t k = global_thread(); k < outer * inner; RG_STEP(k, grid_threads())) {
    const int64_t o = k / inner, i = k - o * inner;
    softmax_backward_line(y, dy, dx, o * c * inner + i, c, inner, 0, 1, log, Identity{});
  }
}

// loss_r = logsumexp(x_r) - (1 - eps) x_r[label] - eps mean(x_r); probs_r = softmax(x_r). One warp
// per row; the probabilities are written unnormalised in the sum pass and scaled in a third pass,
// exactly as the CPU does, so both backends round them the same way.
template <typename T>
__global__ void cross_entropy_forward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ labels,
                                             T* __restrict__ loss, T* __restrict__ probs, int64_t rows, int64_t c,
                                             double eps) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t r = global_thread() / kWarp; r < rows; RG_STEP(r, grid_threads() / kWarp)) {
    const T* x = logits + r * c;
    const int64_t label = labels[r];
    T m = -static_cast<T>(INFINITY);
    double sum_x = 0.0;
    for (int64_t j = lane; j < c; RG_STEP(j, kWarp)) {
      m = running_max(m, x[j]);
      sum_x += static_cast<double>(x[j]);
    }
    m = warp_max(m);
    sum_x = warp_sum(sum_x);
    double sum_exp = 0.0;
    T* p = probs != nullptr ? probs + r * c : nullptr;
    for (int64_t j = lane; j < c; RG_STEP(j, kWarp)) {
      const T e = d_exp(x[j] - m);
      if (p != nullptr) p[j] = e;
      sum_exp += static_cast<double>(e);
    }
    sum_exp = warp_sum(sum_exp);
    if (p != nullptr) {
      const T inv_sum = static_cast<T>(1.0 / sum_exp);
      for (int64_t j = lane; j < c; RG_STEP(j, kWarp)) p[j] *= inv_sum;  // the lane reads back what it wrote
    }
    if (lane == 0) {
      if (label < 0 || label >= c) {
        loss[r] = static_cast<T>(NAN);
      } else {
        const double log_sum_exp = static_cast<double>(m) + ::log(sum_exp);
        const double target_dot_x = (1.0 - eps) * static_cast<double>(x[label]) + eps * sum_x / static_cast<double>(c);
        loss[r] = static_cast<T>(log_sum_exp - target_dot_x);
      }
    }
  }
}

// dlogits[r, j] = scale * dloss[r * dloss_stride] * (probs[r, j] - eps/c - (1 - eps) [j == label]).
template <typename T>
__global__ void cross_entropy_backward_kernel(const T* __restrict__ probs, const int64_t* __restrict__ labels,
                                              const T* __restrict__ dloss, int64_t dloss_stride, double scale,
                                              T* __restrict__ dlogits, int64_t rows, int64_t c, double eps) {
  const T off_target = static_cast<T>(eps / static_cast<double>(c));
  const T on_target = static_cast<T>(1.0 - eps);
  for (int64_t k = global_thread(); k < rows * c; RG_STEP(k, grid_threads())) {
    const int64_t r = k / c, j = k - r * c;
    const int64_t label = labels[r];
    if (label < 0 || label >= c) {
      dlogits[k] = static_cast<T>(NAN);
      continue;
    }
    const T g = static_cast<T>(scale * static_cast<double>(dloss[r * dloss_stride]));
    // Two roundings on the label's element, as on the CPU (d = g (p - off), then d -= g (1 - eps)).
    T d = g * (probs[k] - off_target);
    if (j == label) d -= g * on_target;
    dlogits[k] = d;
  }
}

}  // namespace

void softmax(DType dt, const void* x, void* y, int64_t outer, int64_t c, int64_t inner, bool log, cudaStream_t stream) {
  if (outer * c * inner == 0) return;
  dispatch_floating<true>(log ? "log_softmax" : "softmax", dt, [&](auto zero) {
    using T = decltype(zero);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    if (inner == 1) {
      launch_kernel("softmax_rows_kernel", softmax_rows_kernel<T>, blocks_for(outer * kWarp), kThreads, 0, stream, xs,
                    ys, outer, c, log);
    } else {
      launch_kernel("softmax_columns_kernel", softmax_columns_kernel<T>, blocks_for(outer * inner), kThreads, 0, stream,
                    xs, ys, outer, c, inner, log);
    }
  });
}

void softmax_backward(DType dt, const void* y, const void* dy, void* dx, int64_t outer, int64_t c, int64_t inner,
                      bool log, cudaStream_t stream) {
  if (outer * c * inner == 0) return;
  dispatch_floating<true>(log ? "log_softmax_backward" : "softmax_backward", dt, [&](auto zero) {
    using T = decltype(zero);
    const T* ys = static_cast<const T*>(y);
    const T* gs = static_cast<const T*>(dy);
    T* dxs = static_cast<T*>(dx);
    if (inner == 1) {
      launch_kernel("softmax_backward_rows_kernel", softmax_backward_rows_kernel<T>, blocks_for(outer * kWarp),
                    kThreads, 0, stream, ys, gs, dxs, outer, c, log);
    } else {
      launch_kernel("softmax_backward_columns_kernel", softmax_backward_columns_kernel<T>, blocks_for(outer * inner),
                    kThreads, 0, stream, ys, gs, dxs, outer, c, inner, log);
    }
  });
}

void cross_entropy_forward(DType dt, const void* logits, const int64_t* labels, void* loss, void* probs, int64_t rows,
                           int64_t c, double label_smoothing, cudaStream_t stream) {
  if (rows == 0) return;
  RINGGRAD_CHECK(c > 0, "cross_entropy: expected at least one class, got c = ", c);
  dispatch_floating<false>("cross_entropy", dt, [&](auto zero) {
    using T = decltype(zero);
    launch_kernel("cross_entropy_forward_kernel", cross_entropy_forward_kernel<T>, blocks_for(rows * kWarp), kThreads,
                  0, stream, static_cast<const T*>(logits), labels, static_cast<T*>(loss), static_cast<T*>(probs), rows,
                  c, label_smoothing);
  });
}

void cross_entropy_backward(DType dt, const void* probs, const int64_t* labels, const void* dloss, int64_t dloss_stride,
                            double scale, void* dlogits, int64_t rows, int64_t c, double label_smoothing,
                            cudaStream_t stream) {
  if (rows * c == 0) return;
  dispatch_floating<false>("cross_entropy_backward", dt, [&](auto zero) {
    using T = decltype(zero);
    launch_kernel("cross_entropy_backward_kernel", cross_entropy_backward_kernel<T>, blocks_for(rows * c), kThreads, 0,
                  stream, static_cast<const T*>(probs), labels, static_cast<const T*>(dloss), dloss_stride, scale,
                  static_cast<T*>(dlogits), rows, c, label_smoothing);
  });
}

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
