// kernels/cpu/sgemm_micro_avx2.cpp: the AVX2 + FMA SGEMM micro-kernel, a 6 x 16 tile of C in 12
// ymm registers (sgemm_microkernel.h). Compiled with -march=x86-64-v3; run only when cpu_isa()
// says avx2 or better.
//
// Budget: per k step 2 aligned 32-byte loads of b and 6 broadcasts of a feed 12 FMAs = 192 FLOPs.
// At two FMA units that is 6 cycles a step, and the 8 loads fit the two load ports in 4, so the
// loop is bound by the FMAs -- the chip's peak. (16 ymm registers: 12 accumulators, 2 of b, 1 of a.)
#include "kernels/cpu/sgemm_microkernel.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace ringgrad {
namespace kernels {
namespace cpu {
namespace {

constexpr int kMr = kSgemmAvx2Mr, kNr = kSgemmAvx2Nr;
// How far ahead of the loads B is prefetched: 8 steps, so its lines arrive from L2 in time.
constexpr int64_t kPrefetchFloats = int64_t{8} * kNr;

// C row = alpha * acc (+ beta * C row), two vectors wide.
inline void store_row(float* c, __m256 acc0, __m256 acc1, __m256 alpha, __m256 beta, bool read_c) {
  __m256 v0 = _mm256_mul_ps(alpha, acc0);
  __m256 v1 = _mm256_mul_ps(alpha, acc1);
  if (read_c) {
    v0 = _mm256_fmadd_ps(beta, _mm256_loadu_ps(c), v0);
    v1 = _mm256_fmadd_ps(beta, _mm256_loadu_ps(c + 8), v1);
  }
  _mm256_storeu_ps(c, v0);
  _mm256_storeu_ps(c + 8, v1);
}

}  // namespace

void sgemm_micro_avx2(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha, float beta) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 c00 = zero, c01 = zero, c10 = zero, c11 = zero, c20 = zero, c21 = zero;
  __m256 c30 = zero, c31 = zero, c40 = zero, c41 = zero, c50 = zero, c51 = zero;
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b);
    const __m256 b1 = _mm256_load_ps(b + 8);
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchFloats), _MM_HINT_T0);
    __m256 ar = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(ar, b0, c00);
    c01 = _mm256_fmadd_ps(ar, b1, c01);
    ar = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(ar, b0, c10);
    c11 = _mm256_fmadd_ps(ar, b1, c11);
    ar = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(ar, b0, c20);
    c21 = _mm256_fmadd_ps(ar, b1, c21);
    ar = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(ar, b0, c30);
    c31 = _mm256_fmadd_ps(ar, b1, c31);
    ar = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(ar, b0, c40);
    c41 = _mm256_fmadd_ps(ar, b1, c41);
    ar = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(ar, b0, c50);
    c51 = _mm256_fmadd_ps(ar, b1, c51);
    a += kMr;
    b += kNr;
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  const bool read_c = beta != 0.0f;  // beta == 0: C may hold anything, NaN included
  store_row(c + 0 * ldc, c00, c01, va, vb, read_c);
  store_row(c + 1 * ldc, c10, c11, va, vb, read_c);
  store_row(c + 2 * ldc, c20, c21, va, vb, read_c);
  store_row(c + 3 * ldc, c30, c31, va, vb, read_c);
  store_row(c + 4 * ldc, c40, c41, va, vb, read_c);
  store_row(c + 5 * ldc, c50, c51, va, vb, read_c);
}

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
#endif  // __x86_64__
