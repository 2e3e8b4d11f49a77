// kernels/cuda/random.cu: counter-based random draws (uniform, normal) and dropout on the GPU.
//
// Budget (float32, per element):
//   uniform, normal   write 4 B; one Philox block = 10 rounds of two 32x32 multiplies, ~40 integer
//                     ops, plus log/cos for a normal
//   dropout           read 4 B, write 8 B (y and the mask); one Philox block and a multiply
// Even Philox sits below an H200's ~14 FLOP/byte balance point (67 TFLOP/s f32 / 4.8 TB/s): these
// are memory-bound, judge them in GB/s.
// Target  : at least 80% of DRAM bandwidth (H200: 4.8 TB/s) for arrays of >= 2^24 elements.
// Mapping : grid-stride loops of 256-thread blocks, one element per thread per iteration. Element i
//           draws from Philox counter offset + i, so the values do not depend on the grid.
#include <math.h>

#include "core/base/cuda_check.h"
#include <ringgrad/core/base/philox.h>
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/stride_loop.cuh"
#include "kernels/cuda/random.h"

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

// Explicitly rounded multiply and add: nvcc would otherwise contract lo + width*u into one FMA and
// round differently from the CPU, which rounds the product and the sum separately.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float next_toward(float from, float to) { return nextafterf(from, to); }
__device__ inline double next_toward(double from, double to) { return nextafter(from, to); }

// Uniform draws: lo + width*u, moved below hi when rounding lands on it (the interval is half-open).
template <typename T>
__global__ void uniform_kernel(T* __restrict__ dst, int64_t n, uint64_t seed, uint64_t offset, T lo, T hi, T width) {
  const T below_hi = next_toward(hi, lo);
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) {
    const T v = add_rn(lo, mul_rn(width, philox::uniform<T>(seed, offset + static_cast<uint64_t>(i))));
    dst[i] = v < hi ? v : below_hi;
  }
}

template <typename T>
__global__ void normal_kernel(T* __restrict__ dst, int64_t n, uint64_t seed, uint64_t offset, T mean, T std_dev) {
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads()))
    dst[i] = add_rn(mean, mul_rn(std_dev, philox::normal<T>(seed, offset + static_cast<uint64_t>(i))));
}

// mask[i] = (u_i >= p) / (1 - p), y = x * mask. The draw is philox::uniform of the arithmetic type
// (float for bf16 and f16), so for f32 and f64 the mask is bit-identical to the CPU's.
template <typename T>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ y, T* __restrict__ mask, int64_t n, acc_t<T> p,
                               acc_t<T> scale, uint64_t seed, uint64_t offset) {
  using A = acc_t<T>;
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) {
    const A keep = philox::uniform<A>(seed, offset + static_cast<uint64_t>(i)) >= p ? scale : A(0);
    mask[i] = store_value<T>(keep);
    y[i] = store_value<T>(mul_rn(load(&x[i]), keep));
  }
}

}  // namespace

void random(RandomKind kind, DType dt, void* dst, int64_t n, uint64_t seed, uint64_t offset, double a, double b,
            cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_floating<false>("random", dt, [&](auto zero) {
    using T = decltype(zero);
    T* out = static_cast<T*>(dst);
    if (kind == RandomKind::Uniform) {
      // The CPU rounds the width b - a once from double; so does this.
      launch_kernel("uniform_kernel", uniform_kernel<T>, blocks_for(n), kThreads, 0, stream, out, n, seed, offset,
                    static_cast<T>(a), static_cast<T>(b), static_cast<T>(b - a));
    } else {
      launch_kernel("normal_kernel", normal_kernel<T>, blocks_for(n), kThreads, 0, stream, out, n, seed, offset,
                    static_cast<T>(a), static_cast<T>(b));
    }
  });
}

void dropout(DType dt, const void* x, void* y, void* mask, int64_t n, double p, uint64_t seed, uint64_t offset,
             cudaStream_t stream) {
  RINGGRAD_CHECK(p >= 0.0 && p <= 1.0, "dropout: expected a probability p in [0, 1], got ", p);
  if (n <= 0) return;
  dispatch_floating<true>("dropout", dt, [&](auto zero) {
    using T = decltype(zero);
    using A = acc_t<T>;
    // p == 1 drops everything; 1/(1-p) would be infinite and 0*inf a NaN.
    const A scale = p < 1.0 ? static_cast<A>(1.0 / (1.0 - p)) : A(0);
    launch_kernel("dropout_kernel", dropout_kernel<T>, blocks_for(n), kThreads, 0, stream, static_cast<const T*>(x),
                  static_cast<T*>(y), static_cast<T*>(mask), n, static_cast<A>(p), scale, seed, offset);
  });
}

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
