// kernels/cpu/sgemm_micro_avx512.cpp: the AVX-512 SGEMM micro-kernel, a 12 x 32 tile of C in 24
// zmm registers (sgemm_microkernel.h). Compiled with -march=x86-64-v4; run only when cpu_isa()
// says avx512.
//
// Budget: per k step 2 aligned 64-byte loads of b and 12 broadcasts of a (folded into the FMAs as
// {1to16} memory operands) feed 24 FMAs = 768 FLOPs. At two FMA units that is 12 cycles a step, and
// the 14 loads fit the two load ports in 7, so the loop is bound by the FMAs -- the chip's peak.
#include "kernels/cpu/sgemm_microkernel.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace ringgrad {
namespace kernels {
namespace cpu {
namespace {

constexpr int kMr = kSgemmAvx512Mr, kNr = kSgemmAvx512Nr;
// How far ahead of the loads B is prefetched: 8 steps, so its lines arrive from L2 in time.
constexpr int64_t kPrefetchFloats = int64_t{8} * kNr;

// C row = alpha * acc (+ beta * C row), two vectors wide.
inline void store_row(float* c, __m512 acc0, __m512 acc1, __m512 alpha, __m512 beta, bool read_c) {
  __m512 v0 = _mm512_mul_ps(alpha, acc0);
  __m512 v1 = _mm512_mul_ps(alpha, acc1);
  if (read_c) {
    v0 = _mm512_fmadd_ps(beta, _mm512_loadu_ps(c), v0);
    v1 = _mm512_fmadd_ps(beta, _mm512_loadu_ps(c + 16), v1);
  }
  _mm512_storeu_ps(c, v0);
  _mm512_storeu_ps(c + 16, v1);
}

}  // namespace

void sgemm_micro_avx512(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha, float beta) {
  // Named registers rather than an array: the compiler then never needs the accumulators'
  // addresses, and keeps all 24 in registers for the whole loop.
  const __m512 zero = _mm512_setzero_ps();
  __m512 c00 = zero, c01 = zero, c10 = zero, c11 = zero, c20 = zero, c21 = zero, c30 = zero, c31 = zero;
  __m512 c40 = zero, c41 = zero, c50 = zero, c51 = zero, c60 = zero, c61 = zero, c70 = zero, c71 = zero;
  __m512 c80 = zero, c81 = zero, c90 = zero, c91 = zero, ca0 = zero, ca1 = zero, cb0 = zero, cb1 = zero;
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b);
    const __m512 b1 = _mm512_load_ps(b + 16);
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchFloats), _MM_HINT_T0);
    __m512 ar = _mm512_set1_ps(a[0]);
    c00 = _mm512_fmadd_ps(ar, b0, c00);
    c01 = _mm512_fmadd_ps(ar, b1, c01);
    ar = _mm512_set1_ps(a[1]);
    c10 = _mm512_fmadd_ps(ar, b0, c10);
    c11 = _mm512_fmadd_ps(ar, b1, c11);
    ar = _mm512_set1_ps(a[2]);
    c20 = _mm512_fmadd_ps(ar, b0, c20);
    c21 = _mm512_fmadd_ps(ar, b1, c21);
    ar = _mm512_set1_ps(a[3]);
    c30 = _mm512_fmadd_ps(ar, b0, c30);
    c31 = _mm512_fmadd_ps(ar, b1, c31);
    ar = _mm512_set1_ps(a[4]);
    c40 = _mm512_fmadd_ps(ar, b0, c40);
    c41 = _mm512_fmadd_ps(ar, b1, c41);
    ar = _mm512_set1_ps(a[5]);
    c50 = _mm512_fmadd_ps(ar, b0, c50);
    c51 = _mm512_fmadd_ps(ar, b1, c51);
    ar = _mm512_set1_ps(a[6]);
    c60 = _mm512_fmadd_ps(ar, b0, c60);
    c61 = _mm512_fmadd_ps(ar, b1, c61);
    ar = _mm512_set1_ps(a[7]);
    c70 = _mm512_fmadd_ps(ar, b0, c70);
    c71 = _mm512_fmadd_ps(ar, b1, c71);
    ar = _mm512_set1_ps(a[8]);
    c80 = _mm512_fmadd_ps(ar, b0, c80);
    c81 = _mm512_fmadd_ps(ar, b1, c81);
    ar = _mm512_set1_ps(a[9]);
    c90 = _mm512_fmadd_ps(ar, b0, c90);
    c91 = _mm512_fmadd_ps(ar, b1, c91);
    ar = _mm512_set1_ps(a[10]);
    ca0 = _mm512_fmadd_ps(ar, b0, ca0);
    ca1 = _mm512_fmadd_ps(ar, b1, ca1);
    ar = _mm512_set1_ps(a[11]);
    cb0 = _mm512_fmadd_ps(ar, b0, cb0);
    cb1 = _mm512_fmadd_ps(ar, b1, cb1);
    a += kMr;
    b += kNr;
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const bool read_c = beta != 0.0f;  // beta == 0: C may hold anything, NaN included
  store_row(c + 0 * ldc, c00, c01, va, vb, read_c);
  store_row(c + 1 * ldc, c10, c11, va, vb, read_c);
  store_row(c + 2 * ldc, c20, c21, va, vb, read_c);
  store_row(c + 3 * ldc, c30, c31, va, vb, read_c);
  store_row(c + 4 * ldc, c40, c41, va, vb, read_c);
  store_row(c + 5 * ldc, c50, c51, va, vb, read_c);
  store_row(c + 6 * ldc, c60, c61, va, vb, read_c);
  store_row(c + 7 * ldc, c70, c71, va, vb, read_c);
  store_row(c + 8 * ldc, c80, c81, va, vb, read_c);
  store_row(c + 9 * ldc, c90, c91, va, vb, read_c);
  store_row(c + 10 * ldc, ca0, ca1, va, vb, read_c);
  store_row(c + 11 * ldc, cb0, cb1, va, vb, read_c);
}

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
#endif  // __x86_64__
