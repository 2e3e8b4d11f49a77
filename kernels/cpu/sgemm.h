// kernels/cpu/sgemm.h: ringgrad's own float32 GEMM for the CPU -- packed panels, a register-blocked
// micro-kernel for the vector level cpu_isa() picks, threads over tiles (sgemm.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/isa.h"
#include <ringgrad/kernels/backend.h>  // Activation

namespace ringgrad {
namespace kernels {
namespace cpu {

// One product, C = alpha op(A) op(B) + beta C, then + bias, then the activation. Row-major operands
// with leading dimensions as GemmArgs has them (already checked: ld >= the row length).
struct SgemmProblem {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const float* b = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  float* c = nullptr;
  int64_t ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;
  Activation activation = Activation::None;
};

// Products below this many FLOPs run on the calling thread alone, in this GEMM and in Eigen's
// (gemm.cpp): waking helpers costs a few microseconds, which only pays off once a product takes a
// millisecond or so.
constexpr double kGemmParallelMinFlops = 1 << 24;

// True when a packed micro-kernel exists for this level (avx2, avx512); the baseline level has
// none, and the caller uses Eigen.
bool sgemm_packed_available(Isa isa);

// Computes the product with the micro-kernel of `isa` (sgemm_packed_available(isa) must hold) on up
// to `threads` threads. k may be 0. The result is the same, bit for bit, for any thread count.
void sgemm_packed(Isa isa, const SgemmProblem& p, int threads);

// "avx512, 12 x 32 micro-kernel": what sgemm_packed runs at this level, for benchmark headers.
std::string sgemm_packed_name(Isa isa);

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
