// kernels/cuda/copy.cu: fill, arange and the strided copy with dtype cast on the GPU.
//
// Budget (float32, per element; other dtypes: their sizes):
//   fill, arange   write 4 B; no arithmetic worth counting
//   copy           read 4 B, write 4 B; a cast is one instruction. A dense copy of one dtype is a
//                  cudaMemcpyAsync, no kernel.
// No FLOPs to speak of: memory-bound, judge them in GB/s.
// Target  : at least 80% of DRAM bandwidth (H200: 4.8 TB/s) for arrays of >= 2^24 elements.
// Mapping : grid-stride loops of 256-thread blocks, one element per thread per iteration. A strided
//           copy indexes through a collapsed layout (kernel_util.cuh): a dense side costs one
//           dimension, not ndim.
#include <algorithm>
#include <vector>

#include "core/base/cuda_check.h"
#include "kernels/cuda/copy.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/stride_loop.cuh"

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

template <typename T>
__global__ void fill_kernel(T* __restrict__ dst, int64_t n, T value) {
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) dst[i] = value;
}

template <typename T>
__global__ void arange_kernel(T* __restrict__ dst, int64_t n, double start, double step) {
  // start + i*step, not a running sum, so rounding does not accumulate (as on the CPU).
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads()))
    dst[i] = convert<T>(start + static_cast<double>(i) * step);
}

template <typename Src, typename Dst>
__global__ void copy_kernel(const Src* __restrict__ src, Dst* __restrict__ dst, int64_t n, Layout<2> layout) {
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) {
    int64_t off[2];
    offsets_of(layout, i, off);
    dst[off[1]] = convert<Dst>(src[off[0]]);
  }
}

}  // namespace

void fill(DType dt, void* dst, int64_t n, double value, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_storage("fill", dt, [&](auto zero) {
    using T = decltype(zero);
    launch_kernel("fill_kernel", fill_kernel<T>, blocks_for(n), kThreads, 0, stream, static_cast<T*>(dst), n,
                  convert<T>(value));
  });
}

void arange(DType dt, void* dst, int64_t n, double start, double step, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_storage("arange", dt, [&](auto zero) {
    using T = decltype(zero);
    launch_kernel("arange_kernel", arange_kernel<T>, blocks_for(n), kThreads, 0, stream, static_cast<T*>(dst), n, start,
                  step);
  });
}

void copy(DType src_dt, const StridedDesc& src, DType dst_dt, const StridedDesc& dst, cudaStream_t stream) {
  RINGGRAD_CHECK(src.ndim == dst.ndim && std::equal(src.shape, src.shape + src.ndim, dst.shape),
                 "copy: expected source and destination of the same shape, got ",
                 std::vector<int64_t>(src.shape, src.shape + src.ndim), " and ",
                 std::vector<int64_t>(dst.shape, dst.shape + dst.ndim));
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src_dt == dst_dt && src.is_contiguous() && dst.is_contiguous()) {
    RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(n * dtype_size(src_dt)),
                                        cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const int64_t* const strides[2] = {src.strides, dst.strides};
  const Layout<2> layout = collapse<2>(src.ndim, src.shape, strides);
  dispatch_storage("copy", src_dt, [&](auto src_zero) {
    using Src = decltype(src_zero);
    dispatch_storage("copy", dst_dt, [&](auto dst_zero) {
      using Dst = decltype(dst_zero);
      launch_kernel("copy_kernel", copy_kernel<Src, Dst>, blocks_for(n), kThreads, 0, stream,
                    static_cast<const Src*>(src.data), static_cast<Dst*>(dst.data), n, layout);
    });
  });
}

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
