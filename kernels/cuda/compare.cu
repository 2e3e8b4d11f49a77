// kernels/cuda/compare.cu: the CUDA comparison kernels (kernels/compare.h) -- compare, where, triangle.
//
// Budget : compare reads two elements and writes one byte (9 B a float32 element), where reads a byte
//          and two elements and writes one (13 B), triangle reads and writes one element (8 B); no
//          FLOPs to speak of. Memory-bound: the target is 80% of DRAM bandwidth (H200: 4.8 TB/s) on
//          large arrays.
// Mapping: grid-stride loops of 256-thread blocks over the dense output; strided and broadcast
//          inputs are read through a collapsed layout (kernel_util.cuh), so a dense input costs one
//          dimension. bfloat16 and float16 compare and select as stored (no rounding happens).
// Limitation: no 16-byte vector path as binary.cu has; attention's masks are small next to its GEMMs.
#include <cstdint>

#include <ringgrad/kernels/compare.h>
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/stride_loop.cuh"

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

// The value a comparison sees: bfloat16 and float16 widened to float (exact), anything else as is.
template <typename T>
__device__ inline auto compared(const T* p) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
    return load(p);
  else
    return *p;
}

template <typename T>
__global__ void compare_kernel(CompareOp op, const T* __restrict__ a, const T* __restrict__ b,
                               uint8_t* __restrict__ out, int64_t n, Layout<3> layout) {
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) {
    int64_t off[3];
    offsets_of(layout, i, off);
    out[i] = compare_values(op, compared(&a[off[0]]), compared(&b[off[1]])) ? 1 : 0;
  }
}

template <typename T>
__global__ void where_kernel(const uint8_t* __restrict__ cond, const T* __restrict__ a, const T* __restrict__ b,
                             T* __restrict__ out, int64_t n, Layout<4> layout) {
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) {
    int64_t off[4];
    offsets_of(layout, i, off);
    out[i] = cond[off[0]] ? a[off[1]] : b[off[2]];
  }
}

// x and y may be the same array (tril_ in place), so neither is __restrict__.
template <typename T>
__global__ void triangle_kernel(const T* x, T* y, int64_t n, int64_t rows, int64_t cols, int64_t diagonal, bool upper) {
  for (int64_t e = global_thread(); e < n; RG_STEP(e, grid_threads())) {
    const int64_t j = e % cols, i = (e / cols) % rows;
    const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
    y[e] = keep ? x[e] : convert<T>(0.0f);
  }
}

// The collapsed layout of kInputs strided inputs and the dense output, all of `shape`'s shape.
template <int kInputs>
Layout<kInputs + 1> layout_of(const StridedDesc& shape, const int64_t* const (&input_strides)[kInputs]) {
  int64_t out_strides[kMaxDims];
  contiguous_strides(shape.ndim, shape.shape, out_strides);
  const int64_t* strides[kInputs + 1];
  for (int k = 0; k < kInputs; ++k) strides[k] = input_strides[k];
  strides[kInputs] = out_strides;
  const int64_t* const(&all)[kInputs + 1] = strides;
  return collapse<kInputs + 1>(shape.ndim, shape.shape, all);
}

class CudaCompare final : public CompareKernels {
 public:
  void compare(CompareOp op, DType dt, const StridedDesc& a, const StridedDesc& b, uint8_t* out,
               Stream s) const override {
    const int64_t n = a.numel();
    if (n == 0) return;
    on_stream("compare", s, [&](cudaStream_t st, int) {
      dispatch_storage("compare", dt, [&](auto zero) {
        using T = decltype(zero);
        launch_kernel("compare_kernel", compare_kernel<T>, blocks_for(n), kThreads, 0, st, op,
                      static_cast<const T*>(a.data), static_cast<const T*>(b.data), out, n,
                      layout_of<2>(a, {a.strides, b.strides}));
      });
    });
  }

  void where(DType dt, const StridedDesc& cond, const StridedDesc& a, const StridedDesc& b, void* out,
             Stream s) const override {
    const int64_t n = a.numel();
    if (n == 0) return;
    on_stream("where", s, [&](cudaStream_t st, int) {
      dispatch_storage("where", dt, [&](auto zero) {
        using T = decltype(zero);
        launch_kernel("where_kernel", where_kernel<T>, blocks_for(n), kThreads, 0, st,
                      static_cast<const uint8_t*>(cond.data), static_cast<const T*>(a.data),
                      static_cast<const T*>(b.data), static_cast<T*>(out), n,
                      layout_of<3>(a, {cond.strides, a.strides, b.strides}));
      });
    });
  }

  void triangle(DType dt, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal,
                bool upper, Stream s) const override {
    const int64_t n = batch * rows * cols;
    if (n == 0) return;
    const char* name = upper ? "triu" : "tril";
    on_stream(name, s, [&](cudaStream_t st, int) {
      dispatch_storage(name, dt, [&](auto zero) {
        using T = decltype(zero);
        launch_kernel("triangle_kernel", triangle_kernel<T>, blocks_for(n), kThreads, 0, st, static_cast<const T*>(x),
                      static_cast<T*>(y), n, rows, cols, diagonal, upper);
      });
    });
  }
};

}  // namespace

RINGGRAD_REGISTER_KERNELS(CompareKernels, DeviceKind::CUDA, CudaCompare);

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
