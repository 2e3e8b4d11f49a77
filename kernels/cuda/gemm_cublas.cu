// kernels/cuda/gemm_cublas.cu: the yardstick for kernels/cuda/gemm.cu -- the same GemmArgs through
// cublasSgemmStridedBatched, then bias and activation in a separate elementwise pass.
//
// Budget : the product as in gemm.cu (2*M*N*K FLOPs, compute-bound from N ~ 84 on an H200). The
//          epilogue pass reads and writes C again (8 B and a few FLOPs per element: memory-bound,
//          ~M*N*8 B / 4.8 TB/s); gemm.cu fuses it, which is part of what it is measured against.
// Mapping: cuBLAS is column-major, and a row-major matrix is its transpose in column-major, so
//          row-major C = op(A) op(B) is computed as column-major C^T = op(B)^T op(A)^T: cuBLAS's
//          "A" is our B (n x k, op = trans_b ? T : N, ld = ldb), its "B" is our A, m and n swap.
//          beta == 0 makes cuBLAS ignore C's contents (NaN included), as GemmArgs requires. The
//          epilogue kernel is a grid-stride loop over batch x m x n, launched only when there is a
//          bias or an activation.
#include <algorithm>
#include <climits>
#include <cstdint>

#include <ringgrad/core/base/error.h>
#include "core/base/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/stride_loop.cuh"
#include <ringgrad/kernels/unary_ops.h>

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(detail::str(call, " failed: ", cublasGetStatusName(status), " (", cublasGetStatusString(status), ") at ",
                          file, ":", line));
}
#define RINGGRAD_CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

__global__ void bias_activation_kernel(float* c, int64_t m, int64_t n, int64_t ldc, int64_t stride_c, int64_t batch,
                                       const float* __restrict__ bias, int activation) {
  const int64_t total = batch * m * n;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; RG_STEP(i, step)) {
    const int64_t col = i % n;
    const int64_t row = (i / n) % m;
    const int64_t z = i / (m * n);
    float* p = c + z * stride_c + row * ldc + col;
    float v = *p;
    if (bias != nullptr) v += bias[col];
    // The functors of relu() and gelu(), so the fused epilogue computes the same values as the ops.
    if (activation == static_cast<int>(Activation::Relu)) {
      v = unary_ops::Relu::forward(v, 0.0f);
    } else if (activation == static_cast<int>(Activation::GeluTanh)) {
      v = unary_ops::GeluTanh::forward(v, 0.0f);
    }
    *p = v;
  }
}

}  // namespace

void gemm_cublas_f32(const GemmArgs& args, cudaStream_t stream, cublasHandle_t handle) {
  if (args.dtype != DType::f32)
    throw Error(detail::str("gemm_cublas_f32: expected float32, got ", dtype_name(args.dtype)));
  if (args.m < 0 || args.n < 0 || args.k < 0 || args.batch < 0)
    throw Error(
        detail::str("gemm_cublas_f32: negative size m=", args.m, " n=", args.n, " k=", args.k, " batch=", args.batch));
  if (args.m > INT_MAX || args.n > INT_MAX || args.k > INT_MAX || args.batch > INT_MAX || args.lda > INT_MAX ||
      args.ldb > INT_MAX || args.ldc > INT_MAX)
    throw Error(detail::str("gemm_cublas_f32: sizes or leading dimensions exceed cuBLAS's int: m=", args.m,
                            " n=", args.n, " k=", args.k, " batch=", args.batch));
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;

  RINGGRAD_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const float alpha = static_cast<float>(args.alpha), beta = static_cast<float>(args.beta);
  const int m = static_cast<int>(args.m), n = static_cast<int>(args.n), k = static_cast<int>(args.k);
  // cuBLAS rejects ld < rows of the stored matrix even when that matrix is empty or one row: clamp to 1.
  auto ld = [](int64_t v) { return static_cast<int>(v > 0 ? v : 1); };
  RINGGRAD_CUBLAS_CHECK(cublasSgemmStridedBatched(
      handle, args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
      static_cast<const float*>(args.b), ld(args.ldb), args.stride_b, static_cast<const float*>(args.a), ld(args.lda),
      args.stride_a, &beta, static_cast<float*>(args.c), ld(args.ldc), args.stride_c, static_cast<int>(args.batch)));

  if (args.bias == nullptr && args.activation == Activation::None) return;
  constexpr int kThreads = 256;
  const int64_t total = args.batch * args.m * args.n;
  // Enough blocks to keep the device busy (device_limits); the grid-stride loop covers the rest.
  const int64_t blocks = std::min((total + kThreads - 1) / kThreads, current_device_limits().busy_blocks(kThreads));
  launch_kernel("bias_activation_kernel", bias_activation_kernel, static_cast<unsigned>(blocks), kThreads, 0, stream,
                static_cast<float*>(args.c), args.m, args.n, args.ldc, args.stride_c, args.batch,
                static_cast<const float*>(args.bias), static_cast<int>(args.activation));
}

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
