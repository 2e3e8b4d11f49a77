// kernels/cuda/gemm.cu: float32 GEMM, C = alpha op(A) op(B) + beta C, then + bias, then ReLU/GELU,
// batched at element strides -- GemmArgs of kernels/backend.h, all four transpose combinations.
//
// Budget : 2*M*N*K FLOPs against at least 4*(M*K + K*N + M*N) bytes of DRAM traffic (each operand
//          read once, C written once; beta != 0 reads C too). Square N: N/6 FLOP/byte. An H200 does
//          ~67 TFLOP/s float32 without tensor cores and moves 4.8 TB/s, a balance point of ~14
//          FLOP/byte, so GEMM turns compute-bound from N ~ 84 (M=256, N=1024, K=784: ~90 FLOP/byte,
//          compute-bound too). Judge it in TFLOP/s against cuBLAS SGEMM (TF32 off) and the 67 peak.
// Target : >= 80% of cuBLAS at 4096^3 (the first goal); not yet measured -- bench/bench_gemm_cuda.cpp
//          prints the ratio on a GPU.
// Mapping: a 256-thread block computes one BM x BN tile of C, walking K in steps of BK through two
//          shared-memory buffers (double buffering: tile t+1 is fetched from global memory into
//          registers while tile t is multiplied, then stored into the other buffer; one barrier per
//          step). Each thread owns TM x TN accumulators in registers, laid out as 4-wide fragments
//          spaced BM/(TM/4) apart, so it reads float4s from shared memory: per k, TM+TN loads feed
//          TM*TN FMAs. Two tile shapes:
//            128x128x8, 8x8 per thread  -- large problems (32 FLOP per byte of shared-memory traffic)
//             64x64x16, 4x4 per thread  -- when 128-tiles would leave SMs idle (e.g. 256x1024)
//          In both, each thread fetches exactly one float4 of A and one of B per K step: a 16-byte
//          load when the leading dimension, the pointer and the batch stride allow it and the four
//          elements lie inside the matrix, else four bounds-checked scalar loads (zero outside).
//          Tiles are stored in shared memory k-major ([k][m], [k][n]) with 4 floats of padding per
//          row, so transposed stores from K-contiguous operands do not conflict on banks.
//          The epilogue (alpha, beta, bias, activation) runs on the accumulators before the single
//          store of C (16-byte stores where C allows); beta == 0 never reads C, so NaN there is
//          overwritten. Blocks walk the row tiles and the batch with grid strides over gridDim.y
//          and gridDim.z.
//          Instantiated for 2 tile shapes x 4 transpose combinations; the epilogue is a runtime
//          argument (it runs once per output, off the K loop).
// Registers: 2 resident 128x128 blocks per SM cap a thread at 128 registers, and ptxas (CUDA 13,
//          sm_90) then spills in two variants' K loops (NN: 68 B stored, 96 B loaded per thread;
//          TT: 24/28 B); with 1 block per SM they take 143-167 registers and never spill, at half
//          the resident warps. Which is faster is for the GPU to say: both are built, the default
//          is 2 until bench_gemm_cuda (columns native and native-1blk) has measured them.
//          docs/kernels.md keeps ptxas's report of every kernel.
#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <cstdint>

#include <ringgrad/core/base/error.h>
#include "core/base/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/stride_loop.cuh"
#include "kernels/cuda/runtime.h"
#include <ringgrad/kernels/unary_ops.h>

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// The functors of relu() and gelu() (kernels/unary_ops.h), in float: the fused epilogue computes what
// the separate ops would.
__device__ __forceinline__ float apply_activation(float x, int activation) {
  if (activation == static_cast<int>(Activation::Relu)) return unary_ops::Relu::forward(x, 0.0f);
  if (activation == static_cast<int>(Activation::GeluTanh)) return unary_ops::GeluTanh::forward(x, 0.0f);
  return x;
}

struct KernelArgs {
  int m, n, k;
  const float* a;
  int64_t lda, stride_a;
  const float* b;
  int64_t ldb, stride_b;
  float* c;
  int64_t ldc, stride_c;
  float alpha, beta;
  int64_t batch;
  const float* bias;
  int activation;
  bool vec_a, vec_b, vec_c;  // 16-byte loads/stores are allowed (alignment and leading dimension)
};

// One thread's share of an R x BK operand tile (R rows along m or n, BK along k; R * BK = 4 * 256).
// kKContig: element (r, kk) lives at p[r * ld + kk] (A untransposed, B transposed); otherwise at
// p[kk * ld + r] (A transposed, B untransposed). The tile goes to shared memory as s[kk][r].
template <int R, int BK, bool kKContig>
struct TileLoader {
  static_assert(R * BK == 4 * kThreads, "each thread moves exactly one float4 per tile");
  static constexpr int kLd = R + 4;  // padded shared-memory row

  const float* base;  // this thread's first element of the tile at k0 = 0
  int64_t ld;
  int r, kofs;  // this thread's row (in the whole matrix) and k offset (in the tile)
  int rows, depth;
  bool vec;

  __device__ __forceinline__ TileLoader(const float* p, int64_t ld_, int r0, int rows_, int depth_, bool vec_)
      : ld(ld_), rows(rows_), depth(depth_), vec(vec_) {
    const int t = threadIdx.x;
    if constexpr (kKContig) {
      r = r0 + t / (BK / 4);
      kofs = (t % (BK / 4)) * 4;
      base = p + static_cast<int64_t>(r) * ld + kofs;
    } else {
      kofs = t / (R / 4);
      r = r0 + (t % (R / 4)) * 4;
      base = p + static_cast<int64_t>(kofs) * ld + r;
    }
  }

  // Registers v = this thread's four elements of the tile starting at k0 (zeros outside the matrix).
  __device__ __forceinline__ void load(int k0, float (&v)[4]) const {
    const int kk = k0 + kofs;
    if constexpr (kKContig) {
      const float* src = base + k0;
      if (vec && r < rows && kk + 3 < depth) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(src));
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = (r < rows && kk + j < depth) ? __ldg(src + j) : 0.0f;
      }
    } else {
      const float* src = base + static_cast<int64_t>(k0) * ld;
      if (vec && kk < depth && r + 3 < rows) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(src));
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = (kk < depth && r + j < rows) ? __ldg(src + j) : 0.0f;
      }
    }
  }

  __device__ __forceinline__ static void store(float* __restrict__ s, const float (&v)[4]) {
    const int t = threadIdx.x;
    if constexpr (kKContig) {
      const int r = t / (BK / 4);
      const int kk = (t % (BK / 4)) * 4;
#pragma unroll
      for (int j = 0; j < 4; ++j) s[(kk + j) * kLd + r] = v[j];
    } else {
      const int kk = t / (R / 4);
      const int r = (t % (R / 4)) * 4;
      *reinterpret_cast<float4*>(s + kk * kLd + r) = make_float4(v[0], v[1], v[2], v[3]);
    }
  }
};

// kMinBlocks: blocks of 256 threads that must fit on one SM at once, which caps the registers per
// thread at 65536 / (256 kMinBlocks): 128 for 2 blocks, 255 for 1 (see "Registers" above).
template <int BM, int BN, int BK, int TM, int TN, bool kTransA, bool kTransB, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) gemm_kernel(const KernelArgs g) {
  static_assert((BM / TM) * (BN / TN) == kThreads, "one thread per TM x TN sub-tile");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "fragments are float4s");
  using LoadA = TileLoader<BM, BK, !kTransA>;
  using LoadB = TileLoader<BN, BK, kTransB>;
  constexpr int kLdA = LoadA::kLd, kLdB = LoadB::kLd;
  constexpr int kFragA = TM / 4, kFragB = TN / 4;
  constexpr int kStepA = BM / kFragA, kStepB = BN / kFragB;  // distance between a thread's fragments

  __shared__ __align__(16) float sa[2][BK * kLdA];
  __shared__ __align__(16) float sb[2][BK * kLdB];

  const int tx = threadIdx.x % (BN / TN);
  const int ty = threadIdx.x / (BN / TN);
  const int row_tiles = (g.m + BM - 1) / BM;
  const int col0 = blockIdx.x * BN;
  const int k_tiles = (g.k + BK - 1) / BK;

  for (int64_t z = blockIdx.z; z < g.batch; RG_STEP(z, gridDim.z)) {
    const float* a = g.a + z * g.stride_a;
    const float* b = g.b + z * g.stride_b;
    float* c = g.c + z * g.stride_c;
    // Row tiles with a grid stride over gridDim.y, as the batch over gridDim.z: a device's grid
    // may have fewer rows of blocks than the matrix has tiles.
    for (int tile = static_cast<int>(blockIdx.y); tile < row_tiles; RG_STEP(tile, static_cast<int>(gridDim.y))) {
      const int row0 = tile * BM;

      float acc[TM][TN];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

      const LoadA load_a(a, g.lda, row0, g.m, g.k, g.vec_a);
      const LoadB load_b(b, g.ldb, col0, g.n, g.k, g.vec_b);
      float va[4] = {}, vb[4] = {};  // = {}: GCC cannot see that k_tiles > 0 guards every use
      if (k_tiles > 0) {
        load_a.load(0, va);
        load_b.load(0, vb);
        LoadA::store(sa[0], va);
        LoadB::store(sb[0], vb);
      }
      __syncthreads();

      for (int kt = 0; kt < k_tiles; ++kt) {
        const int cur = kt & 1;
        const bool more = kt + 1 < k_tiles;
        if (more) {  // fetch the next tile while this one is multiplied
          load_a.load((kt + 1) * BK, va);
          load_b.load((kt + 1) * BK, vb);
        }
        const float* As = sa[cur];
        const float* Bs = sb[cur];
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
          float ra[TM], rb[TN];
#pragma unroll
          for (int f = 0; f < kFragA; ++f) {
            const float4 q = *reinterpret_cast<const float4*>(As + kk * kLdA + f * kStepA + ty * 4);
            ra[f * 4 + 0] = q.x, ra[f * 4 + 1] = q.y, ra[f * 4 + 2] = q.z, ra[f * 4 + 3] = q.w;
          }
#pragma unroll
          for (int f = 0; f < kFragB; ++f) {
            const float4 q = *reinterpret_cast<const float4*>(Bs + kk * kLdB + f * kStepB + tx * 4);
            rb[f * 4 + 0] = q.x, rb[f * 4 + 1] = q.y, rb[f * 4 + 2] = q.z, rb[f * 4 + 3] = q.w;
          }
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
        }
        if (more) {  // the other buffer was last read before the previous barrier
          LoadA::store(sa[cur ^ 1], va);
          LoadB::store(sb[cur ^ 1], vb);
        }
        __syncthreads();
      }

      // Epilogue: alpha, beta C, bias, activation; each 4-wide column fragment stored at once.
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int row = row0 + (i / 4) * kStepA + ty * 4 + i % 4;
        if (row >= g.m) continue;
        float* crow = c + static_cast<int64_t>(row) * g.ldc;
#pragma unroll
        for (int f = 0; f < kFragB; ++f) {
          const int col = col0 + f * kStepB + tx * 4;
          if (col >= g.n) continue;
          float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          const bool whole = g.vec_c && col + 3 < g.n;
          if (g.beta != 0.0f && whole) {
            const float4 q = *reinterpret_cast<const float4*>(crow + col);
            out[0] = q.x, out[1] = q.y, out[2] = q.z, out[3] = q.w;
          }
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (!whole && col + j >= g.n) break;
            float v = g.alpha * acc[i][f * 4 + j];
            if (g.beta != 0.0f) v = fmaf(g.beta, whole ? out[j] : crow[col + j], v);
            if (g.bias != nullptr) v += __ldg(g.bias + col + j);
            out[j] = apply_activation(v, g.activation);
            if (!whole) crow[col + j] = out[j];
          }
          if (whole) *reinterpret_cast<float4*>(crow + col) = make_float4(out[0], out[1], out[2], out[3]);
        }
      }
      // The next tile or batch entry refills sa[0]/sb[0]: every thread must have finished reading them.
      __syncthreads();
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// 16-byte access is safe when every row (or column) start of every batch entry is 16-byte aligned.
bool vectorisable(const void* p, int64_t ld, int64_t stride, int64_t batch) {
  return aligned16(p) && ld % 4 == 0 && (batch == 1 || stride % 4 == 0);
}

int sm_count() { return current_device_limits().sms; }

template <int BM, int BN, int BK, int TM, int TN, int kMinBlocks>
void launch_tile(const KernelArgs& g, bool trans_a, bool trans_b, cudaStream_t stream) {
  const DeviceLimits& limits = current_device_limits();
  const dim3 grid(static_cast<unsigned>((g.n + BN - 1) / BN),
                  static_cast<unsigned>(std::min<int64_t>((g.m + BM - 1) / BM, limits.max_grid[1])),
                  static_cast<unsigned>(std::min<int64_t>(g.batch, limits.max_grid[2])));
  const auto launch = [&](auto kernel) { launch_kernel("gemm_kernel", kernel, grid, kThreads, 0, stream, g); };
  if (!trans_a && !trans_b)
    launch(gemm_kernel<BM, BN, BK, TM, TN, false, false, kMinBlocks>);
  else if (!trans_a && trans_b)
    launch(gemm_kernel<BM, BN, BK, TM, TN, false, true, kMinBlocks>);
  else if (trans_a && !trans_b)
    launch(gemm_kernel<BM, BN, BK, TM, TN, true, false, kMinBlocks>);
  else
    launch(gemm_kernel<BM, BN, BK, TM, TN, true, true, kMinBlocks>);
}

}  // namespace

void gemm_f32(const GemmArgs& args, cudaStream_t stream, int large_tile_blocks_per_sm) {
  if (args.dtype != DType::f32) throw Error(detail::str("gemm_f32: expected float32, got ", dtype_name(args.dtype)));
  if (large_tile_blocks_per_sm != 1 && large_tile_blocks_per_sm != 2)
    throw Error(
        detail::str("gemm_f32: expected 1 or 2 blocks per SM for the 128x128 tile, got ", large_tile_blocks_per_sm));
  if (args.m < 0 || args.n < 0 || args.k < 0 || args.batch < 0)
    throw Error(detail::str("gemm_f32: negative size m=", args.m, " n=", args.n, " k=", args.k, " batch=", args.batch));
  constexpr int64_t kMaxDim = (int64_t{1} << 31) - 256;  // tile arithmetic is in int
  if (args.m > kMaxDim || args.n > kMaxDim || args.k > kMaxDim)
    throw Error(detail::str("gemm_f32: sizes m=", args.m, " n=", args.n, " k=", args.k, " exceed 2^31"));
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;

  KernelArgs g;
  g.m = static_cast<int>(args.m), g.n = static_cast<int>(args.n), g.k = static_cast<int>(args.k);
  g.a = static_cast<const float*>(args.a), g.lda = args.lda, g.stride_a = args.stride_a;
  g.b = static_cast<const float*>(args.b), g.ldb = args.ldb, g.stride_b = args.stride_b;
  g.c = static_cast<float*>(args.c), g.ldc = args.ldc, g.stride_c = args.stride_c;
  g.alpha = static_cast<float>(args.alpha), g.beta = static_cast<float>(args.beta);
  g.batch = args.batch;
  g.bias = static_cast<const float*>(args.bias);
  g.activation = static_cast<int>(args.activation);
  g.vec_a = vectorisable(args.a, args.lda, args.stride_a, args.batch);
  g.vec_b = vectorisable(args.b, args.ldb, args.stride_b, args.batch);
  g.vec_c = vectorisable(args.c, args.ldc, args.stride_c, args.batch);

  // 128x128 tiles unless they would leave more than half the SMs without a block.
  const int64_t big_tiles = ((args.m + 127) / 128) * ((args.n + 127) / 128) * args.batch;
  if (big_tiles * 2 < sm_count())
    launch_tile<64, 64, 16, 4, 4, 2>(g, args.trans_a, args.trans_b, stream);
  else if (large_tile_blocks_per_sm == 1)
    launch_tile<128, 128, 8, 8, 8, 1>(g, args.trans_a, args.trans_b, stream);
  else
    launch_tile<128, 128, 8, 8, 8, 2>(g, args.trans_a, args.trans_b, stream);
}

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
