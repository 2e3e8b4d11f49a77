// tests/cuda_emu/src/cublas.cpp: the cuBLAS calls ringgrad makes, as a plain reference GEMM.
//
// Column-major, as cuBLAS: C = alpha op(A) op(B) + beta C with op(A) m x k, op(B) k x n, C m x n;
// beta == 0 never reads C. Each dot product accumulates in double and is rounded once, so it is at
// least as accurate as cuBLAS's float32 SGEMM; the tests' tolerances are set for the real one.
// The argument checks are cuBLAS's (CUBLAS_STATUS_INVALID_VALUE), and the matrices must be device
// memory of the current device, as a real handle's kernels would need.
#include <cublas_v2.h>

#include <string>

#include "state.h"
#include "streams.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  int device = 0;
};

namespace {

bool device_matrix(const float* p, int rows, int cols, int ld, long long stride, int batch) {
  if (rows == 0 || cols == 0 || batch == 0) return true;
  const long long last =
      static_cast<long long>(cols - 1) * ld + (rows - 1) + static_cast<long long>(batch - 1) * stride;
  cuda_emu::Region r;
  return p != nullptr && stride >= 0 && cuda_emu::find_region(p, static_cast<size_t>(last + 1) * sizeof(float), &r) &&
         r.device >= 0;
}

// The reference GEMM: column-major, double accumulation; what a queued cuBLAS call runs.
void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, long long stride_a,
          const float* b, int ldb, long long stride_b, float beta, float* c, int ldc, long long stride_c, int batch) {
  for (int z = 0; z < batch; ++z) {
    const float* az = a + z * stride_a;
    const float* bz = b + z * stride_b;
    float* cz = c + z * stride_c;
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        double dot = 0.0;
        for (int l = 0; l < k; ++l) {
          const float av = ta ? az[l + static_cast<long long>(i) * lda] : az[i + static_cast<long long>(l) * lda];
          const float bv = tb ? bz[j + static_cast<long long>(l) * ldb] : bz[l + static_cast<long long>(j) * ldb];
          dot += static_cast<double>(av) * static_cast<double>(bv);
        }
        float& out = cz[i + static_cast<long long>(j) * ldc];
        const double prior = beta == 0.0f ? 0.0 : static_cast<double>(beta) * static_cast<double>(out);
        out = static_cast<float>(static_cast<double>(alpha) * dot + prior);
      }
    }
  }
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (cuda_emu::use_context("cublasCreate") != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH, cuda_emu::current_device()};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return "an error occurred";
  }
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* a, int lda,
                                         long long stride_a, const float* b, int ldb, long long stride_b,
                                         const float* beta, float* c, int ldc, long long stride_c, int batch) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  auto at_least = [](int rows) { return rows > 1 ? rows : 1; };
  if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < at_least(a_rows) || ldb < at_least(b_rows) || ldc < at_least(m) ||
      alpha == nullptr || beta == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  int device = 0;
  if (!cuda_emu::stream_device(handle->stream, &device) || device != cuda_emu::current_device()) {
    cuda_emu::fail(cudaErrorInvalidResourceHandle, "cublasSgemm: the handle's stream is not one of the current device");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (!device_matrix(c, m, n, ldc, stride_c, batch) ||
      (k > 0 && (!device_matrix(a, a_rows, a_cols, lda, stride_a, batch) ||
                 !device_matrix(b, b_rows, b_cols, ldb, stride_b, batch)))) {
    cuda_emu::fail(cudaErrorIllegalAddress, "cublasSgemm: a matrix is not wholly inside device memory");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  // alpha and beta are host pointers (CUBLAS_POINTER_MODE_HOST): read at the call, as cuBLAS does.
  const float alpha_value = *alpha, beta_value = *beta;
  cuda_emu::enqueue(handle->stream, "cublasSgemmStridedBatched",
                    [=] {
                      gemm(ta, tb, m, n, k, alpha_value, a, lda, stride_a, b, ldb, stride_b, beta_value, c, ldc,
                           stride_c, batch);
                    },
                    {{a, false}, {b, false}, {c, true}});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* a, int lda, const float* b, int ldb,
                           const float* beta, float* c, int ldc) {
  return cublasSgemmStridedBatched(handle, transa, transb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}
