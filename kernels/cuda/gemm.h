// kernels/cuda/gemm.h: float32 GEMM on the GPU, as raw-pointer launchers taking ringgrad's GemmArgs
// (kernels/backend.h documents the semantics: row-major, trans flags, leading dimensions, alpha/beta,
// strided batches with stride 0 allowed, per-column bias, then the activation).
//
//   gemm_f32         ringgrad's own kernel (kernels/cuda/gemm.cu)
//   gemm_cublas_f32  the yardstick: cublasSgemmStridedBatched plus a small epilogue kernel
//                    (kernels/cuda/gemm_cublas.cu)
//
// Both run asynchronously on `stream`; all pointers in `args` are device pointers (bias included),
// args.dtype must be f32. Private to the library and its tests: it needs the CUDA toolkit's headers.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {
namespace cuda {

// Throws ringgrad::Error for a dtype other than f32 or negative sizes; launches nothing when
// m, n or batch is 0. large_tile_blocks_per_sm (1 or 2) picks the register budget of the 128x128
// tile (gemm.cu, "Registers"); only the GEMM benchmark asks for 1.
void gemm_f32(const GemmArgs& args, cudaStream_t stream, int large_tile_blocks_per_sm = 2);

// Sets `handle`'s stream to `stream` and leaves it there. The handle's math mode is the caller's:
// a handle from cublasCreate uses CUBLAS_DEFAULT_MATH, i.e. true float32 (no TF32).
void gemm_cublas_f32(const GemmArgs& args, cudaStream_t stream, cublasHandle_t handle);

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
