// kernels/cpu/sgemm_microkernel.h: the register-blocked inner loop of the CPU SGEMM (sgemm.cpp),
// one per vector level, each in a file compiled for that level (kernels/cpu/isa.h).
//
// A micro-kernel computes one MR x NR tile of C from two packed panels:
//
//   a: MR values of op(A)'s column k, for k = 0 .. kc-1   (MR * kc floats, k-major)
//   b: NR values of op(B)'s row k,    for k = 0 .. kc-1   (NR * kc floats, k-major, 64-byte aligned)
//
//   C[r][j] = alpha * sum_k a[k*MR + r] * b[k*NR + j] + beta * C[r][j]    (beta == 0: C is not read)
//
// Its MR x NR accumulators live in vector registers for the whole k loop; each step loads NR/W
// vectors of b (W floats a vector) and broadcasts MR values of a, then does MR * NR / W fused
// multiply-adds. So a step moves (MR + NR) floats from L1 for 2 * MR * NR FLOPs.
//
//   level    W   MR x NR   accumulators   FMAs / loads a step   registers (of 16 or 32)
//   avx2     8    6 x 16   12 ymm         12 / (2 + 6)          12 + 2 + 1 = 15 of 16
//   avx512  16   12 x 32   24 zmm         24 / (2 + 12)         24 + 2 + 1 = 27 of 32
//
// Two FMA units with 4-cycle latency need at least 8 independent accumulators to stay busy; both
// tiles have more. The tile must be whole: the driver hands a partial tile at the edge of C a
// scratch tile instead.
#pragma once

#include <cstdint>

namespace ringgrad {
namespace kernels {
namespace cpu {

using SgemmMicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                                  float beta);

constexpr int kSgemmAvx2Mr = 6, kSgemmAvx2Nr = 16;
constexpr int kSgemmAvx512Mr = 12, kSgemmAvx512Nr = 32;

// Defined only on x86-64; call them only where cpu_isa() allows.
void sgemm_micro_avx2(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha, float beta);
void sgemm_micro_avx512(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha, float beta);

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
