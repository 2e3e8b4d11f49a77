// kernels/cuda/unary.cu: elementwise y = f(x) and its backward dx = dy * f'(saved) on the GPU, for
// every op of kernels/unary_ops.h.
//
// Budget (float32, per element):
//   unary            read 4 B, write 4 B; 1 FLOP (neg, relu, scalar ops) to ~20 (tanh, erf GELU, SiLU)
//   unary_backward   read 8 B (saved, dy), write 4 B (4 B less for the ops that save nothing); 1-30 FLOPs
// Even the GELUs sit far below an H200's ~14 FLOP/byte balance point (67 TFLOP/s f32 / 4.8 TB/s),
// so these are memory-bound: judge them in GB/s.
// Target  : at least 80% of DRAM bandwidth (H200: 4.8 TB/s) for dense arrays of >= 2^24 elements.
// Mapping : grid-stride loops of 256-thread blocks, 16 bytes per thread per iteration (float4 /
//           double2 / 8 x bf16 or f16) when every pointer is 16-byte aligned, the tail element by
//           element. bfloat16 and float16 are loaded into float, computed on, and rounded back.
//
// The op is a runtime argument rather than a template parameter: it is the same for every thread, so
// visit_unary's switch is a uniformly taken branch, and one kernel per dtype keeps the build small
// (14 ops x 3 dtypes x 2 directions x 2 widths would be 168 kernels).
#include "core/base/cuda_check.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/stride_loop.cuh"
#include "kernels/cuda/unary.h"
#include <ringgrad/kernels/unary_ops.h>

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

// y = f(x) and dy * f'(s) through the op's functor: the formulas of the CPU backend, in type A.
template <typename A>
__device__ inline A unary_value(UnaryOp op, A x, A alpha) {
  return visit_unary(op, [&](auto f) { return decltype(f)::forward(x, alpha); });
}
template <typename A>
__device__ inline A unary_derivative(UnaryOp op, A s, A dy, A alpha) {
  return visit_unary(op, [&](auto f) { return decltype(f)::backward(s, dy, alpha); });
}

// Dense y[i] = f(x[i]): kVec elements per load where the pointers allow, then the tail. x may be y
// (mul_ scales in place): each element is read, then written, by one thread, so no __restrict__ --
// it would promise the compiler that the two never alias.
template <typename T, int kVec>
__global__ void unary_kernel(UnaryOp op, const T* x, T* y, int64_t n, acc_t<T> alpha) {
  using P = Pack<T, kVec>;
  const int64_t vectors = n / kVec;
  for (int64_t v = global_thread(); v < vectors; RG_STEP(v, grid_threads())) {
    P p = reinterpret_cast<const P*>(x)[v];
#pragma unroll
    for (int k = 0; k < kVec; ++k) p.v[k] = store_value<T>(unary_value(op, load(&p.v[k]), alpha));
    reinterpret_cast<P*>(y)[v] = p;
  }
  // The last n % kVec elements: fewer than kVec, and every grid has more threads than that.
  if (const int64_t i = vectors * kVec + global_thread(); i < n)
    y[i] = store_value<T>(unary_value(op, load(&x[i]), alpha));
}

// `saved` is null for the ops that save nothing; they never look at it.
template <typename T, int kVec>
__global__ void unary_backward_kernel(UnaryOp op, const T* __restrict__ saved, const T* __restrict__ dy,
                                      T* __restrict__ dx, int64_t n, acc_t<T> alpha) {
  using A = acc_t<T>;
  using P = Pack<T, kVec>;
  const int64_t vectors = n / kVec;
  for (int64_t v = global_thread(); v < vectors; RG_STEP(v, grid_threads())) {
    P g = reinterpret_cast<const P*>(dy)[v];
    P s = g;
    if (saved != nullptr) s = reinterpret_cast<const P*>(saved)[v];
#pragma unroll
    for (int k = 0; k < kVec; ++k) g.v[k] = store_value<T>(unary_derivative(op, load(&s.v[k]), load(&g.v[k]), alpha));
    reinterpret_cast<P*>(dx)[v] = g;
  }
  if (const int64_t i = vectors * kVec + global_thread(); i < n) {  // the tail, as in unary_kernel
    const A s = saved != nullptr ? load(&saved[i]) : A(0);
    dx[i] = store_value<T>(unary_derivative(op, s, load(&dy[i]), alpha));
  }
}

}  // namespace

void unary(UnaryOp op, DType dt, const void* x, void* y, int64_t n, double alpha, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_floating<true>("unary", dt, [&](auto zero) {
    using T = decltype(zero);
    using A = acc_t<T>;
    constexpr int kVec = vec_width(sizeof(T));
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    if (aligned16(x) && aligned16(y)) {
      launch_kernel("unary_kernel", unary_kernel<T, kVec>, blocks_for(n / kVec + 1), kThreads, 0, stream, op, xs, ys, n,
                    static_cast<A>(alpha));
    } else {
      launch_kernel("unary_kernel", unary_kernel<T, 1>, blocks_for(n), kThreads, 0, stream, op, xs, ys, n,
                    static_cast<A>(alpha));
    }
  });
}

void unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n, double alpha,
                    cudaStream_t stream) {
  if (n <= 0) return;
  const bool saves_nothing = unary_saved(op) == unary_ops::Saved::None;
  RINGGRAD_CHECK(saved != nullptr || saves_nothing, "unary_backward: ", unary_name(op),
                 " needs its saved input or output, got a null pointer");
  if (saves_nothing) saved = nullptr;
  dispatch_floating<true>("unary_backward", dt, [&](auto zero) {
    using T = decltype(zero);
    using A = acc_t<T>;
    constexpr int kVec = vec_width(sizeof(T));
    const T* ss = static_cast<const T*>(saved);
    const T* gs = static_cast<const T*>(dy);
    T* dxs = static_cast<T*>(dx);
    if (aligned16(dy) && aligned16(dx) && (saved == nullptr || aligned16(saved))) {
      launch_kernel("unary_backward_kernel", unary_backward_kernel<T, kVec>, blocks_for(n / kVec + 1), kThreads, 0,
                    stream, op, ss, gs, dxs, n, static_cast<A>(alpha));
    } else {
      launch_kernel("unary_backward_kernel", unary_backward_kernel<T, 1>, blocks_for(n), kThreads, 0, stream, op, ss,
                    gs, dxs, n, static_cast<A>(alpha));
    }
  });
}

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
