// kernels/cpu/sgemm.cpp: float32 GEMM on the CPU, C = alpha op(A) op(B) + beta C, then + bias, then
// ReLU/GELU -- the CPU counterpart of kernels/cuda/gemm.cu, built the way BLIS and OpenBLAS are.
//
// Budget : 2*M*N*K FLOPs against at least 4*(M*K + K*N + M*N) bytes from memory. The MLP's
//          256 x 1024 x 784 product is 411 MFLOP on 4.9 MB: 84 FLOP/byte, so compute-bound; a core
//          does 2 FMA units x W lanes x 2 FLOPs a cycle (W = 16 with AVX-512: 64 FLOPs/cycle, about
//          190 GFLOP/s at 3 GHz; W = 8 with AVX2: half). Judge it in GFLOP/s against OpenBLAS SGEMM
//          in the same run (bench/bench_gemm_cpu.cpp).
// Mapping: the same three levels as the CUDA GEMM, one cache level each instead of shared memory
//          and registers:
//            registers  an MR x NR tile of C in vector registers, for the whole k block
//                       (sgemm_microkernel.h: 12 x 32 with AVX-512, 6 x 16 with AVX2);
//            L1         one A panel, MR rows x KC, reused by every NR-wide tile of the B block;
//            L2         one B block, KC x NC, packed once per k block and reused by every A panel.
//          Packing copies a block of op(A) into MR-row panels and of op(B) into NR-column panels,
//          each stored k-major: the micro-kernel then reads both with unit stride, whatever the
//          transposes and leading dimensions were, and the A panel is zero-padded to MR rows and
//          the B panel to NR columns, so every tile is computed whole (a tile at C's edge goes
//          through a scratch tile). Loops, outermost first:
//            for each MC-row band of C:         (A's rows packed at once; 3072 by default)
//              for each KC-deep block of K:     pack the band's A panels (threads split the panels)
//                in parallel, for each NC-column block of C (times row chunks when too few):
//                  pack that B block; for each A panel: for each B panel: micro-kernel
//          Threads: the NC-column blocks (and, when there are fewer of them than threads, chunks of
//          rows) are the parallel parts; each part packs its own B block.
//          Determinism: every size here (KC, tile edges at multiples of MR and NR from C's origin)
//          depends on the shape and the vector level only, never on the thread count, so each
//          element of C is summed in the same order on any number of threads.
//          Epilogue: the first k block applies beta (later ones add); after the last, each tile
//          gets the bias and the activation while it is in L1 (gemm_epilogue.h).
#include "kernels/cpu/sgemm.h"

#include <algorithm>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>  // SSE only: this file is compiled for the portable level
#endif

#include "kernels/cpu/gemm_epilogue.h"
#include "kernels/cpu/sgemm_microkernel.h"
#include "kernels/cpu/thread_pool.h"
#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace kernels {
namespace cpu {
namespace {

// The block sizes of one vector level. KC and NC are upper bounds: the real ones divide K and N
// into nearly equal blocks (a 784-deep product gets two k blocks of 392, not 384 + 384 + 16).
struct Blocking {
  int mr, nr;      // the micro-kernel's tile
  int64_t kc_max;  // depth of a k block: an A panel (mr x kc floats) must sit in L1 beside a B panel
  int64_t nc_max;  // width of a B block: kc x nc floats must sit in L2
  int64_t mc_max;  // rows of A packed at once
  SgemmMicroKernel kernel;
};

// L1 is 32-48 KB and L2 0.5-2 MB on the CPUs this runs on (Zen 3, Zen 4, Sapphire Rapids).
// AVX-512: A panel 12 x 384 x 4 B = 18 KB; B block 384 x 480 x 4 B = 720 KB.
// AVX2:    A panel 6 x 256 x 4 B = 6 KB;   B block 256 x 384 x 4 B = 384 KB (Zen 3: 512 KB L2).
Blocking blocking_for(Isa isa) {
#if defined(__x86_64__)  // the micro-kernels exist only there (sgemm_microkernel.h)
  switch (isa) {
    case Isa::avx512: return {kSgemmAvx512Mr, kSgemmAvx512Nr, 384, 480, 3072, sgemm_micro_avx512};
    case Isa::avx2: return {kSgemmAvx2Mr, kSgemmAvx2Nr, 256, 384, 3072, sgemm_micro_avx2};
    case Isa::baseline: break;
  }
#endif
  throw Error(detail::str("sgemm: no packed micro-kernel for the vector level ", isa_name(isa), " on this processor"));
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// A float buffer kept by one thread across calls (packing buffers: allocating megabytes per call
// would cost a page fault per 4 KB each time). 64-byte aligned, for the micro-kernel's aligned
// loads. A nested call on the same thread (a GEMM from inside a part of another) finds the buffer
// taken and uses a fresh one of its own.
class Scratch {
 public:
  float* reserve(size_t count) {
    if (storage_.size() < count + kAlignFloats) storage_.resize(count + kAlignFloats);
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    const size_t skip = (kAlign - address % kAlign) % kAlign / sizeof(float);
    return storage_.data() + skip;
  }
  bool busy = false;

 private:
  static constexpr size_t kAlign = 64, kAlignFloats = kAlign / sizeof(float);
  std::vector<float> storage_;
};

// Takes the thread's scratch buffer for one use, or a private one when it is already taken.
class ScratchLease {
 public:
  ScratchLease(Scratch& shared, size_t count) : scratch_(shared.busy ? own_ : shared) {
    if (!shared.busy) {
      shared.busy = true;
      held_ = &shared;
    }
    data_ = scratch_.reserve(count);
  }
  ~ScratchLease() {
    if (held_ != nullptr) held_->busy = false;
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  float* data() const { return data_; }

 private:
  Scratch own_;
  Scratch& scratch_;
  Scratch* held_ = nullptr;
  float* data_ = nullptr;
};

thread_local Scratch a_scratch, b_scratch;

// The two ways a panel is filled. Either way the panel is k-major, `width` floats per k, and the
// slots past `live` are zeros (the panel of a tile at C's edge).
//
// Copy: the panel's row k is `live` contiguous values at src + k*ld (op(B) with B as stored, or
// op(A) with A stored transposed).
void pack_copy(const float* src, int64_t ld, int64_t live, int64_t kc, int width, float* dst) {
  for (int64_t k = 0; k < kc; ++k) {
    const float* in = src + k * ld;
    float* out = dst + k * width;
    for (int64_t j = 0; j < live; ++j) out[j] = in[j];
    for (int64_t j = live; j < width; ++j) out[j] = 0.0f;
  }
}

// Transpose: slot r of the panel's row k is src[r*ld + k] -- `live` rows of the source, each
// contiguous in k (op(A) with A as stored, or op(B) with B stored transposed). Four rows at a time
// go through a 4 x 4 register transpose, so both the reads and the writes are 16 bytes wide.
void pack_transposed(const float* src, int64_t ld, int64_t live, int64_t kc, int width, float* dst) {
  int64_t r = 0;
#if defined(__SSE2__)
  for (; r + 4 <= live; r += 4) {
    const float* row0 = src + r * ld;
    const float* row1 = row0 + ld;
    const float* row2 = row1 + ld;
    const float* row3 = row2 + ld;
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4) {
      __m128 v0 = _mm_loadu_ps(row0 + k), v1 = _mm_loadu_ps(row1 + k);
      __m128 v2 = _mm_loadu_ps(row2 + k), v3 = _mm_loadu_ps(row3 + k);
      _MM_TRANSPOSE4_PS(v0, v1, v2, v3);  // now v_i holds column k + i of the four rows
      _mm_storeu_ps(dst + (k + 0) * width + r, v0);
      _mm_storeu_ps(dst + (k + 1) * width + r, v1);
      _mm_storeu_ps(dst + (k + 2) * width + r, v2);
      _mm_storeu_ps(dst + (k + 3) * width + r, v3);
    }
    for (; k < kc; ++k) {
      float* out = dst + k * width + r;
      out[0] = row0[k];
      out[1] = row1[k];
      out[2] = row2[k];
      out[3] = row3[k];
    }
  }
#endif
  for (; r < live; ++r)
    for (int64_t k = 0; k < kc; ++k) dst[k * width + r] = src[r * ld + k];
  for (int64_t k = 0; k < kc; ++k)
    for (int64_t j = live; j < width; ++j) dst[k * width + j] = 0.0f;
}

// Packs op(A)[i0 .. i0+rows, p0 .. p0+kc) into mr-row panels, panels first_panel .. end_panel - 1,
// panel q at dst + q*mr*kc.
void pack_a(const SgemmProblem& p, int64_t i0, int64_t rows, int64_t p0, int64_t kc, int mr, int64_t first_panel,
            int64_t end_panel, float* dst) {
  for (int64_t q = first_panel; q < end_panel; ++q) {
    const int64_t r0 = i0 + q * mr, live = std::min<int64_t>(mr, rows - q * mr);
    if (p.trans_a) {
      pack_copy(p.a + p0 * p.lda + r0, p.lda, live, kc, mr, dst + q * mr * kc);  // A stored k x m
    } else {
      pack_transposed(p.a + r0 * p.lda + p0, p.lda, live, kc, mr, dst + q * mr * kc);  // A stored m x k
    }
  }
}

// Packs op(B)[p0 .. p0+kc, j0 .. j0+cols) into nr-column panels, panel q at dst + q*nr*kc.
void pack_b(const SgemmProblem& p, int64_t p0, int64_t kc, int64_t j0, int64_t cols, int nr, float* dst) {
  for (int64_t q = 0; q < ceil_div(cols, nr); ++q) {
    const int64_t c0 = j0 + q * nr, live = std::min<int64_t>(nr, cols - q * nr);
    if (p.trans_b) {
      pack_transposed(p.b + c0 * p.ldb + p0, p.ldb, live, kc, nr, dst + q * nr * kc);  // B stored n x k
    } else {
      pack_copy(p.b + p0 * p.ldb + c0, p.ldb, live, kc, nr, dst + q * nr * kc);  // B stored k x n
    }
  }
}

// One tile of C: the micro-kernel straight into C when the tile is whole, else into a scratch tile
// whose live part is then merged into C with the same beta rule.
void run_tile(const Blocking& bl, int64_t kc, const float* a_panel, const float* b_panel, float* c, int64_t ldc,
              int64_t rows, int64_t cols, float alpha, float beta) {
  if (rows == bl.mr && cols == bl.nr) {
    bl.kernel(kc, a_panel, b_panel, c, ldc, alpha, beta);
    return;
  }
  alignas(64) float tile[kSgemmAvx512Mr * kSgemmAvx512Nr];  // the largest tile of any level
  bl.kernel(kc, a_panel, b_panel, tile, bl.nr, alpha, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = c + r * ldc;
    const float* t = tile + r * bl.nr;
    if (beta == 0.0f) {
      for (int64_t j = 0; j < cols; ++j) row[j] = t[j];  // C's old value is not read: NaN is overwritten
    } else {
      for (int64_t j = 0; j < cols; ++j) row[j] = t[j] + beta * row[j];
    }
  }
}

// C = beta C (+ bias, activation): the product of an empty sum.
void scale_only(const SgemmProblem& p) {
  for (int64_t i = 0; i < p.m; ++i) {
    float* row = p.c + i * p.ldc;
    for (int64_t j = 0; j < p.n; ++j) row[j] = p.beta == 0.0f ? 0.0f : p.beta * row[j];
  }
  gemm_epilogue(p.c, p.m, p.n, p.ldc, p.bias, p.activation);
}

}  // namespace

bool sgemm_packed_available(Isa isa) {
#if defined(__x86_64__)
  return isa == Isa::avx2 || isa == Isa::avx512;
#else
  return false;
#endif
}

std::string sgemm_packed_name(Isa isa) {
  if (!sgemm_packed_available(isa)) return std::string(isa_name(isa)) + ", no packed micro-kernel";
  const Blocking bl = blocking_for(isa);
  return std::string(isa_name(isa)) + ", " + std::to_string(bl.mr) + " x " + std::to_string(bl.nr) + " micro-kernel";
}

void sgemm_packed(Isa isa, const SgemmProblem& p, int threads) {
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) {
    scale_only(p);
    return;
  }
  const Blocking bl = blocking_for(isa);
  const int64_t k_blocks = ceil_div(p.k, bl.kc_max);
  const int64_t kc_size = ceil_div(p.k, k_blocks);

  const double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  const int workers = flops < kGemmParallelMinFlops ? 1 : std::max(1, threads);

  // Column blocks: at most nc_max wide, a multiple of nr, and -- when N allows -- a multiple of the
  // worker count, so that no worker gets one block more than another (3 blocks on 2 workers would
  // leave one idle for a third of the time). Their edges may move with the worker count; the tiles'
  // edges (multiples of nr from column 0) do not.
  const int64_t n_panels = ceil_div(p.n, bl.nr);
  int64_t n_blocks = std::min(round_up(ceil_div(p.n, bl.nc_max), workers), n_panels);
  const int64_t nc = ceil_div(n_panels, n_blocks) * bl.nr;
  n_blocks = ceil_div(p.n, nc);

  const int64_t mc = std::min(round_up(p.m, bl.mr), bl.mc_max);
  ScratchLease a_lease(a_scratch, static_cast<size_t>(mc * kc_size));
  float* a_packed = a_lease.data();

  for (int64_t i0 = 0; i0 < p.m; i0 += mc) {
    const int64_t rows = std::min(mc, p.m - i0);
    const int64_t a_panels = ceil_div(rows, bl.mr);
    // Too few column blocks to keep every worker busy: cut the rows into chunks of whole panels too.
    const int64_t m_chunks = std::min<int64_t>(a_panels, std::max<int64_t>(1, workers / n_blocks));
    const int parts = static_cast<int>(n_blocks * m_chunks);
    for (int64_t p0 = 0; p0 < p.k; p0 += kc_size) {
      const int64_t kc = std::min(kc_size, p.k - p0);
      const bool first = p0 == 0, last = p0 + kc == p.k;
      const float beta = first ? p.beta : 1.0f;

      const int pack_parts = static_cast<int>(std::min<int64_t>(workers, a_panels));
      parallel_for(pack_parts, [&](int part) {
        pack_a(p, i0, rows, p0, kc, bl.mr, a_panels * part / pack_parts, a_panels * (part + 1) / pack_parts, a_packed);
      });

      parallel_for(parts, [&](int part) {
        const int64_t jb = part % n_blocks, chunk = part / n_blocks;
        const int64_t j0 = jb * nc, cols = std::min(nc, p.n - j0);
        const int64_t q0 = a_panels * chunk / m_chunks, q1 = a_panels * (chunk + 1) / m_chunks;
        ScratchLease b_lease(b_scratch, static_cast<size_t>(round_up(cols, bl.nr) * kc));
        float* b_packed = b_lease.data();
        pack_b(p, p0, kc, j0, cols, bl.nr, b_packed);
        for (int64_t q = q0; q < q1; ++q) {
          const int64_t r0 = q * bl.mr, tile_rows = std::min<int64_t>(bl.mr, rows - r0);
          float* c_rows = p.c + (i0 + r0) * p.ldc;
          for (int64_t c0 = 0; c0 < cols; c0 += bl.nr) {
            const int64_t tile_cols = std::min<int64_t>(bl.nr, cols - c0);
            float* c_tile = c_rows + j0 + c0;
            run_tile(bl, kc, a_packed + q * bl.mr * kc, b_packed + c0 * kc, c_tile, p.ldc, tile_rows, tile_cols,
                     p.alpha, beta);
            if (last)
              gemm_epilogue(c_tile, tile_rows, tile_cols, p.ldc, p.bias ? p.bias + j0 + c0 : nullptr, p.activation);
          }
        }
      });
    }
  }
}

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
