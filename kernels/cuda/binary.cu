// kernels/cuda/binary.cu: elementwise out = a op b (add, sub, mul, div) on the GPU, with broadcasting.
//
// Budget (float32, per element): read 8 B, write 4 B; 1 FLOP. Far below an H200's ~14 FLOP/byte
// balance point (67 TFLOP/s f32 / 4.8 TB/s): memory-bound, judge it in GB/s.
// Target  : at least 80% of DRAM bandwidth (H200: 4.8 TB/s) for dense arrays of >= 2^24 elements.
// Mapping : grid-stride loops of 256-thread blocks. Dense operands move 16 bytes per thread per
//           iteration (float4 / double2 / 8 x bf16 or f16) when every pointer is 16-byte aligned, the tail
//           element by element. Broadcast operands index through a collapsed layout (kernel_util.cuh):
//           a dense operand costs one dimension, not ndim. bfloat16 and float16 are computed in float.
//
// The op is a runtime argument, the same for every thread: a uniformly taken branch, one kernel per dtype.
#include <algorithm>
#include <vector>

#include "core/base/cuda_check.h"
#include "kernels/cuda/binary.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/stride_loop.cuh"

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

template <typename A>
__device__ inline A binary_value(BinaryOp op, A a, A b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
  }
  return a;
}

template <typename T, int kVec>
__global__ void binary_dense_kernel(BinaryOp op, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                    int64_t n) {
  using P = Pack<T, kVec>;
  const int64_t vectors = n / kVec;
  for (int64_t v = global_thread(); v < vectors; RG_STEP(v, grid_threads())) {
    P pa = reinterpret_cast<const P*>(a)[v];
    const P pb = reinterpret_cast<const P*>(b)[v];
#pragma unroll
    for (int k = 0; k < kVec; ++k) pa.v[k] = store_value<T>(binary_value(op, load(&pa.v[k]), load(&pb.v[k])));
    reinterpret_cast<P*>(out)[v] = pa;
  }
  // The last n % kVec elements: fewer than kVec, and every grid has more threads than that.
  if (const int64_t i = vectors * kVec + global_thread(); i < n)
    out[i] = store_value<T>(binary_value(op, load(&a[i]), load(&b[i])));
}

// out is dense, so the linear index is its offset; a and b are read through the layout's strides,
// a broadcast dimension having stride 0 (its value is re-read from L1/L2, not DRAM).
template <typename T>
__global__ void binary_strided_kernel(BinaryOp op, const T* __restrict__ a, const T* __restrict__ b,
                                      T* __restrict__ out, int64_t n, Layout<3> layout) {
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) {
    int64_t off[3];
    offsets_of(layout, i, off);
    out[i] = store_value<T>(binary_value(op, load(&a[off[0]]), load(&b[off[1]])));
  }
}

}  // namespace

void binary(BinaryOp op, DType dt, const StridedDesc& a, const StridedDesc& b, void* out, cudaStream_t stream) {
  RINGGRAD_CHECK(a.ndim == b.ndim && std::equal(a.shape, a.shape + a.ndim, b.shape),
                 "binary: expected both operands broadcast to the output's shape, got ",
                 std::vector<int64_t>(a.shape, a.shape + a.ndim), " and ",
                 std::vector<int64_t>(b.shape, b.shape + b.ndim));
  const int64_t n = a.numel();
  if (n == 0) return;
  dispatch_floating<true>("binary", dt, [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = vec_width(sizeof(T));
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    T* po = static_cast<T*>(out);
    if (a.is_contiguous() && b.is_contiguous()) {
      if (aligned16(pa) && aligned16(pb) && aligned16(po)) {
        launch_kernel("binary_dense_kernel", binary_dense_kernel<T, kVec>, blocks_for(n / kVec + 1), kThreads, 0,
                      stream, op, pa, pb, po, n);
      } else {
        launch_kernel("binary_dense_kernel", binary_dense_kernel<T, 1>, blocks_for(n), kThreads, 0, stream, op, pa, pb,
                      po, n);
      }
    } else {
      int64_t out_strides[kMaxDims];
      contiguous_strides(a.ndim, a.shape, out_strides);
      const int64_t* const strides[3] = {a.strides, b.strides, out_strides};
      const Layout<3> layout = collapse<3>(a.ndim, a.shape, strides);
      launch_kernel("binary_strided_kernel", binary_strided_kernel<T>, blocks_for(n), kThreads, 0, stream, op, pa, pb,
                    po, n, layout);
    }
  });
}

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
