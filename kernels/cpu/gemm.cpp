// kernels/cpu/gemm.cpp: batched C = alpha op(A) op(B) + beta C, then + bias and an activation.
//
// Which GEMM runs: float32 on a CPU with AVX2 + FMA or AVX-512 goes to ringgrad's own packed GEMM
// (sgemm.cpp), whose micro-kernel is chosen at run time (isa.h), so the one portable build is fast
// on every x86-64 machine. float64 (gradient checks, references) and CPUs without AVX2 use Eigen,
// on maps over the caller's row-major buffers, as described below.
//
// Budget: 2*M*N*K FLOPs against 4*(M*K + K*N + M*N) bytes (float32) per product. Arithmetic
// intensity grows with the sizes -- for M = N = K it is M/6 FLOP/byte -- so beyond about 64 the
// product is compute-bound and Eigen's blocked, vectorised kernel runs near the cores' peak. Large
// products are split into bands of C computed on several threads (kernels/cpu/thread_pool.h);
// small products are memory- and overhead-bound and stay on the calling thread.
//
// Nothing is copied: a buffer becomes an Eigen::Map with an outer stride (the leading dimension),
// and a transposed operand is the .transpose() of its map, which Eigen's kernel reads in place.
// The epilogue (bias, activation) runs right after each product, row by row, while C is in cache.
#include <algorithm>
#include <string>
#include <type_traits>

#include <Eigen/Core>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/eigen_map.h"
#include "kernels/cpu/gemm_epilogue.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/cpu/thread_pool.h"

namespace ringgrad {
namespace kernels {
namespace {

using cpu::ConstMatrixMap;
using cpu::MatrixMap;

// The leading dimension of a rows x cols row-major matrix as stored. With one row (or none) it is
// never stepped over and callers may pass anything (a [1, n] tensor's stride can be 1 or 0), so it
// is normalised to cols: Eigen then never sees a row that overlaps the next. With more rows, a
// leading dimension below cols is a caller's bug and is reported.
int64_t leading_dimension(const char* name, int64_t ld, int64_t rows, int64_t cols) {
  if (rows <= 1) return std::max(ld, cols);
  RINGGRAD_CHECK(ld >= cols, "gemm: expected ", name, " >= ", cols, " (the row length of a ", rows, " x ", cols,
                 " matrix as stored), got ", ld);
  return ld;
}

// op(X) for an operand stored row-major: X itself (rows x cols), or -- kTrans -- the transpose of
// the cols x rows matrix actually stored. Either way an expression over the caller's memory.
template <bool kTrans, typename T>
auto operand(const T* data, int64_t rows, int64_t cols, int64_t ld) {
  if constexpr (kTrans) {
    return ConstMatrixMap<T>(data, cols, rows, Eigen::OuterStride<>(ld)).transpose();
  } else {
    return ConstMatrixMap<T>(data, rows, cols, Eigen::OuterStride<>(ld));
  }
}

// One product on a block of C: C = alpha op(A) op(B) + beta C, then + bias, then the activation.
template <typename T, bool kTransA, bool kTransB>
void gemm_block(const T* a, const T* b, T* c, const T* bias, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                int64_t ldc, T alpha, T beta, Activation activation) {
  MatrixMap<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  if (k == 0) {
    // An empty sum: op(A) op(B) is all zeros, leaving C = beta C (+ bias, activation below).
    if (beta == T(0)) {
      C.setZero();
    } else if (beta != T(1)) {
      C *= beta;
    }
  } else {
    const auto A = operand<kTransA>(a, m, k, lda);
    const auto B = operand<kTransB>(b, k, n, ldb);
    if (beta == T(0)) {
      // Assigned, not scaled: beta = 0 means C's old contents are ignored, NaN included
      // (0 * NaN would be NaN), so C may be fresh uninitialised memory.
      C.noalias() = alpha * A * B;
    } else {
      if (beta != T(1)) C *= beta;
      C.noalias() += alpha * A * B;
    }
  }
  cpu::gemm_epilogue(c, m, n, ldc, bias, activation);
}

// Each thread's band keeps at least this many rows (or columns) of C, so Eigen's blocked kernel
// still works on full-size panels.
constexpr int64_t kMinBand = 32;

template <typename T, bool kTransA, bool kTransB>
void gemm_batched(const GemmArgs& g) {
  const int64_t m = g.m, n = g.n, k = g.k;
  const int64_t lda = kTransA ? leading_dimension("lda", g.lda, k, m) : leading_dimension("lda", g.lda, m, k);
  const int64_t ldb = kTransB ? leading_dimension("ldb", g.ldb, n, k) : leading_dimension("ldb", g.ldb, k, n);
  const int64_t ldc = leading_dimension("ldc", g.ldc, m, n);
  const T alpha = static_cast<T>(g.alpha), beta = static_cast<T>(g.beta);
  const T* bias = static_cast<const T*>(g.bias);

  if constexpr (std::is_same_v<T, float>) {
    const cpu::Isa isa = cpu::cpu_isa();
    if (cpu::sgemm_packed_available(isa)) {
      for (int64_t p = 0; p < g.batch; ++p) {
        cpu::SgemmProblem problem;
        problem.m = m;
        problem.n = n;
        problem.k = k;
        problem.a = static_cast<const float*>(g.a) + p * g.stride_a;
        problem.lda = lda;
        problem.trans_a = kTransA;
        problem.b = static_cast<const float*>(g.b) + p * g.stride_b;
        problem.ldb = ldb;
        problem.trans_b = kTransB;
        problem.c = static_cast<float*>(g.c) + p * g.stride_c;
        problem.ldc = ldc;
        problem.alpha = alpha;
        problem.beta = beta;
        problem.bias = bias;
        problem.activation = g.activation;
        cpu::sgemm_packed(isa, problem, cpu::kernel_threads());
      }
      return;
    }
  }

  // Split C into horizontal bands (rows of op(A)) or vertical ones (columns of op(B)), whichever
  // dimension is larger; every band is an independent product over the same k.
  const bool split_rows = m >= n;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int64_t bands_max = std::max<int64_t>(1, (split_rows ? m : n) / kMinBand);
  const int parts =
      flops < cpu::kGemmParallelMinFlops ? 1 : static_cast<int>(std::min<int64_t>(cpu::kernel_threads(), bands_max));

  for (int64_t p = 0; p < g.batch; ++p) {
    const T* a = static_cast<const T*>(g.a) + p * g.stride_a;
    const T* b = static_cast<const T*>(g.b) + p * g.stride_b;
    T* c = static_cast<T*>(g.c) + p * g.stride_c;
    cpu::parallel_for(parts, [&](int part) {
      if (split_rows) {
        const int64_t i0 = m * part / parts, i1 = m * (part + 1) / parts;
        // Rows i0.. of op(A): rows of A as stored, or columns of the stored transpose.
        const T* a_band = a + (kTransA ? i0 : i0 * lda);
        gemm_block<T, kTransA, kTransB>(a_band, b, c + i0 * ldc, bias, i1 - i0, n, k, lda, ldb, ldc, alpha, beta,
                                        g.activation);
      } else {
        const int64_t j0 = n * part / parts, j1 = n * (part + 1) / parts;
        const T* b_band = b + (kTransB ? j0 * ldb : j0);  // columns j0.. of op(B)
        gemm_block<T, kTransA, kTransB>(a, b_band, c + j0, bias ? bias + j0 : nullptr, m, j1 - j0, k, lda, ldb, ldc,
                                        alpha, beta, g.activation);
      }
    });
  }
}

}  // namespace

void CpuBackend::gemm(const GemmArgs& g, Stream) {
  cpu::dispatch_floating("gemm", g.dtype, [&](auto zero) {
    using T = decltype(zero);
    RINGGRAD_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 0, "gemm: expected non-negative sizes, got m=", g.m,
                   " n=", g.n, " k=", g.k, " batch=", g.batch);
    if (g.m == 0 || g.n == 0 || g.batch == 0) return;  // C is empty: nothing to write
    if (g.trans_a) {
      g.trans_b ? gemm_batched<T, true, true>(g) : gemm_batched<T, true, false>(g);
    } else {
      g.trans_b ? gemm_batched<T, false, true>(g) : gemm_batched<T, false, false>(g);
    }
  });
}

// Computed here because the SIMD sets Eigen uses are fixed when this file is compiled (-march).
std::string cpu_gemm_build() {
  const cpu::Isa isa = cpu::cpu_isa();
  const std::string f32 = cpu::sgemm_packed_available(isa) ? "float32: ringgrad packed SGEMM (" +
                                                                 cpu::sgemm_packed_name(isa) + ", chosen at run time); "
                                                           : "float32 and float64: ";
#ifdef RINGGRAD_CPU_ARCH_FLAG
  const std::string arch = ", -march=" RINGGRAD_CPU_ARCH_FLAG;
#else
  const std::string arch = ", compiler's default -march";
#endif
  // Eigen's own list names AVX512 or AVX but never AVX2 or FMA below AVX-512, and those two decide
  // its GEMM kernel on an AVX2 machine; so the vector width and FMA are spelled out first.
#if defined(EIGEN_VECTORIZE_AVX512)
  const std::string kernel = "AVX-512";
#elif defined(EIGEN_VECTORIZE_AVX2)
  const std::string kernel = "AVX2";
#elif defined(EIGEN_VECTORIZE_AVX)
  const std::string kernel = "AVX";
#else
  const std::string kernel = "SSE";
#endif
#if defined(EIGEN_VECTORIZE_FMA)
  const std::string fma = " + FMA";
#else
  const std::string fma = ", no FMA";
#endif
  return f32 + (cpu::sgemm_packed_available(isa) ? "float64: " : "") + "Eigen " + std::to_string(EIGEN_WORLD_VERSION) +
         "." + std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) + ", " + kernel + fma +
         " kernels (Eigen lists: " + Eigen::SimdInstructionSetsInUse() + ")" + arch;
}

}  // namespace kernels
}  // namespace ringgrad
