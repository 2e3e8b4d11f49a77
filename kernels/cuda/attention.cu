// kernels/cuda/attention.cu: fused scaled dot-product attention on the GPU (kernels/attention.h):
// the forward, and the backward as three kernels (delta, dq, dk and dv).
//
// Budget : per problem the forward does 2 T S d + 2 T S dv FLOPs (half when causal) and one exp per
//          score; the backward recomputes the scores and does about 2.5x that. It reads q, k, v (and
//          out, dout) a few times and writes out (dq, dk, dv) once: O((T + S) d) bytes against
//          O(T S d) FLOPs, so it is compute-bound from a few hundred keys on. No T x S matrix of
//          scores or probabilities ever reaches global memory: the softmax is online (a running
//          maximum and sum per row), and the backward recomputes p_ij = e^(s_ij - lse_i). A key
//          padding mask adds one byte per key per block (S bytes per 32 rows, next to the 4 S (d + dv)
//          bytes of k and v): it is staged with the k tile and skips a padding key's dot products.
// Mapping: a block of 32 threads takes 32 rows (queries in the forward and for dq, keys for dk and
//          dv), one row per thread, and walks the other side in tiles of 8 rows staged in shared
//          memory, which all 32 threads read; each thread keeps its row's accumulator in shared
//          memory too (head dims up to kMaxDim). Blocks loop over (problem, row block) tasks. The
//          padding bytes of a key tile sit in shared memory beside it; in dk and dv, where a thread
//          owns a key, its own byte decides whether the key takes part at all.
//          Every sum runs in one fixed order: no atomics, the same bits on every run.
// Target : correctness and the memory saving first. Dot products on CUDA cores, not tensor cores:
//          far below an H200's peak; a tensor-core version (FlashAttention-2's mapping) is the step up.
// Limitation: head_dim and value_dim up to kMaxDim (128); float32, bfloat16 and float16 (computed in
//          float32); float64 attention runs on the CPU.
#include <cmath>
#include <cstdint>

#include <ringgrad/kernels/attention.h>
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/stride_loop.cuh"

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

constexpr int kRows = 32;     // rows of a block, one thread each
constexpr int kTile = 8;      // rows of the other side staged in shared memory at a time
constexpr int kMaxDim = 128;  // the largest head_dim and value_dim the shared arrays hold

// Keys query i sees: [0, kv_len), or [0, min(i + 1, kv_len)) when causal.
__device__ inline int64_t visible_keys(const AttentionShape& sh, int64_t i) {
  return sh.causal ? (i + 1 < sh.kv_len ? i + 1 : sh.kv_len) : sh.kv_len;
}

// Copies rows [r0, r0 + n) of a [*, cols] array into tile[0 .. n), as float, with the whole block.
template <typename T>
__device__ inline void stage(float (*tile)[kMaxDim], const T* src, int64_t r0, int n, int cols) {
  for (int e = threadIdx.x; e < n * cols; RG_STEP(e, static_cast<int>(blockDim.x)))
    tile[e / cols][e % cols] = load(&src[(r0 + e / cols) * cols + e % cols]);
}

// padded[0 .. n) = whether keys [j0, j0 + n) are padding (`padding`: the problem's mask row, or null),
// one thread a key; n <= kTile <= kRows, the block's threads.
__device__ inline void stage_padding(bool* padded, const uint8_t* padding, int64_t j0, int n) {
  const int t = threadIdx.x;
  if (t < n) padded[t] = padding != nullptr && padding[j0 + t] != 0;
}

template <typename T>
__global__ void attention_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                         KeyPaddingMask pad, T* __restrict__ out, float* __restrict__ lse,
                                         AttentionShape sh, int64_t row_blocks) {
  __shared__ float ks[kTile][kMaxDim];
  __shared__ float vs[kTile][kMaxDim];
  __shared__ bool padded[kTile];
  __shared__ float acc[kRows][kMaxDim];
  const int t = threadIdx.x, d = static_cast<int>(sh.head_dim), dv = static_cast<int>(sh.value_dim);
  const float scale = static_cast<float>(sh.scale);
  for (int64_t task = blockIdx.x; task < sh.batch * row_blocks; RG_STEP(task, static_cast<int64_t>(gridDim.x))) {
    const int64_t b = task / row_blocks, i0 = (task - b * row_blocks) * kRows, i = i0 + t;
    const bool active = i < sh.q_len;
    const T* qi = q + (b * sh.q_len + (active ? i : 0)) * d;
    const int64_t mine = active ? visible_keys(sh, i) : 0;
    const int64_t last = (i0 + kRows < sh.q_len ? i0 + kRows : sh.q_len) - 1;
    const int64_t keys = visible_keys(sh, last);  // the most any row of the block sees
    const uint8_t* padding = pad.row(b);
    for (int c = 0; c < dv; ++c) acc[t][c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
      const int n = static_cast<int>(keys - j0 < kTile ? keys - j0 : kTile);
      __syncthreads();  // every thread is done with the previous tile
      stage(ks, k + b * sh.kv_len * d, j0, n, d);
      stage(vs, v + b * sh.kv_len * dv, j0, n, dv);
      stage_padding(padded, padding, j0, n);
      __syncthreads();
      for (int jj = 0; jj < n && j0 + jj < mine; ++jj) {
        if (padded[jj]) continue;
        float s = 0.0f;
        for (int c = 0; c < d; ++c) s += load(&qi[c]) * ks[jj][c];
        s *= scale;
        if (s > m) {  // a new maximum: rescale what was summed against the old one
          const float factor = expf(m - s);
          for (int c = 0; c < dv; ++c) acc[t][c] *= factor;
          l *= factor;
          m = s;
        }
        const float p = expf(s - m);
        l += p;
        for (int c = 0; c < dv; ++c) acc[t][c] += p * vs[jj][c];
      }
    }
    if (active) {  // l == 0: every key the row may see is padding; out 0, and lse +inf would make any p 0
      T* oi = out + (b * sh.q_len + i) * dv;
      for (int c = 0; c < dv; ++c) oi[c] = store_value<T>(l > 0.0f ? acc[t][c] / l : 0.0f);
      lse[b * sh.q_len + i] = l > 0.0f ? m + logf(l) : INFINITY;
    }
  }
}

// delta_i = dout_i . out_i, the softmax backward's row term.
template <typename T>
__global__ void attention_delta_kernel(const T* __restrict__ out, const T* __restrict__ dout, float* __restrict__ delta,
                                       int64_t rows, int dv) {
  for (int64_t r = global_thread(); r < rows; RG_STEP(r, grid_threads())) {
    float acc = 0.0f;
    for (int c = 0; c < dv; ++c) acc += load(&dout[r * dv + c]) * load(&out[r * dv + c]);
    delta[r] = acc;
  }
}

// dq_i = scale sum_j p_ij (dp_ij - delta_i) k_j, dp_ij = dout_i . v_j: one query row per thread.
template <typename T>
__global__ void attention_dq_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                    KeyPaddingMask pad, const float* __restrict__ lse, const T* __restrict__ dout,
                                    const float* __restrict__ delta, T* __restrict__ dq, AttentionShape sh,
                                    int64_t row_blocks) {
  __shared__ float ks[kTile][kMaxDim];
  __shared__ float vs[kTile][kMaxDim];
  __shared__ bool padded[kTile];
  __shared__ float acc[kRows][kMaxDim];
  const int t = threadIdx.x, d = static_cast<int>(sh.head_dim), dv = static_cast<int>(sh.value_dim);
  const float scale = static_cast<float>(sh.scale);
  for (int64_t task = blockIdx.x; task < sh.batch * row_blocks; RG_STEP(task, static_cast<int64_t>(gridDim.x))) {
    const int64_t b = task / row_blocks, i0 = (task - b * row_blocks) * kRows, i = i0 + t;
    const bool active = i < sh.q_len;
    const int64_t row = b * sh.q_len + (active ? i : 0);
    const T* qi = q + row * d;
    const T* doi = dout + row * dv;
    const float li = active ? lse[row] : 0.0f, di = active ? delta[row] : 0.0f;
    const int64_t mine = active ? visible_keys(sh, i) : 0;
    const int64_t last = (i0 + kRows < sh.q_len ? i0 + kRows : sh.q_len) - 1;
    const int64_t keys = visible_keys(sh, last);
    const uint8_t* padding = pad.row(b);
    for (int c = 0; c < d; ++c) acc[t][c] = 0.0f;
    for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
      const int n = static_cast<int>(keys - j0 < kTile ? keys - j0 : kTile);
      __syncthreads();
      stage(ks, k + b * sh.kv_len * d, j0, n, d);
      stage(vs, v + b * sh.kv_len * dv, j0, n, dv);
      stage_padding(padded, padding, j0, n);
      __syncthreads();
      for (int jj = 0; jj < n && j0 + jj < mine; ++jj) {
        if (padded[jj]) continue;
        float s = 0.0f, dp = 0.0f;
        for (int c = 0; c < d; ++c) s += load(&qi[c]) * ks[jj][c];
        for (int c = 0; c < dv; ++c) dp += load(&doi[c]) * vs[jj][c];
        const float ds = expf(scale * s - li) * (dp - di);
        for (int c = 0; c < d; ++c) acc[t][c] += scale * ds * ks[jj][c];
      }
    }
    if (active)
      for (int c = 0; c < d; ++c) dq[row * d + c] = store_value<T>(acc[t][c]);
  }
}

// dv_j = sum_i p_ij dout_i and dk_j = scale sum_i p_ij (dp_ij - delta_i) q_i over the queries that
// see key j: one key row per thread, queries staged in tiles. A padding key is seen by none: its
// thread still stages and waits with the block, and writes zeros. A query that sees no key at all
// sees no key j either, so its lse (+inf) is never used here.
template <typename T>
__global__ void attention_dkv_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                     KeyPaddingMask pad, const float* __restrict__ lse, const T* __restrict__ dout,
                                     const float* __restrict__ delta, T* __restrict__ dk, T* __restrict__ dv_out,
                                     AttentionShape sh, int64_t key_blocks) {
  __shared__ float qs[kTile][kMaxDim];
  __shared__ float dos[kTile][kMaxDim];
  __shared__ float row_terms[2][kTile];  // lse and delta of the staged queries
  __shared__ float dk_acc[kRows][kMaxDim];
  __shared__ float dv_acc[kRows][kMaxDim];
  const int t = threadIdx.x, d = static_cast<int>(sh.head_dim), dv = static_cast<int>(sh.value_dim);
  const float scale = static_cast<float>(sh.scale);
  for (int64_t task = blockIdx.x; task < sh.batch * key_blocks; RG_STEP(task, static_cast<int64_t>(gridDim.x))) {
    const int64_t b = task / key_blocks, j0 = (task - b * key_blocks) * kRows, j = j0 + t;
    const bool active = j < sh.kv_len;
    const uint8_t* padding = pad.row(b);
    const bool attended = active && (padding == nullptr || padding[j] == 0);
    const int64_t key = b * sh.kv_len + (active ? j : 0);
    const T* kj = k + key * d;
    const T* vj = v + key * dv;
    for (int c = 0; c < d; ++c) dk_acc[t][c] = 0.0f;
    for (int c = 0; c < dv; ++c) dv_acc[t][c] = 0.0f;
    // Queries before j0 see none of this block's keys when causal.
    for (int64_t i0 = sh.causal ? j0 : 0; i0 < sh.q_len; i0 += kTile) {
      const int n = static_cast<int>(sh.q_len - i0 < kTile ? sh.q_len - i0 : kTile);
      __syncthreads();
      stage(qs, q + b * sh.q_len * d, i0, n, d);
      stage(dos, dout + b * sh.q_len * dv, i0, n, dv);
      if (t < n) {
        row_terms[0][t] = lse[b * sh.q_len + i0 + t];
        row_terms[1][t] = delta[b * sh.q_len + i0 + t];
      }
      __syncthreads();
      if (!attended) continue;
      for (int ii = 0; ii < n; ++ii) {
        if (sh.causal && i0 + ii < j) continue;
        float s = 0.0f, dp = 0.0f;
        for (int c = 0; c < d; ++c) s += qs[ii][c] * load(&kj[c]);
        for (int c = 0; c < dv; ++c) dp += dos[ii][c] * load(&vj[c]);
        const float p = expf(scale * s - row_terms[0][ii]);
        const float ds = p * (dp - row_terms[1][ii]);
        for (int c = 0; c < dv; ++c) dv_acc[t][c] += p * dos[ii][c];
        for (int c = 0; c < d; ++c) dk_acc[t][c] += scale * ds * qs[ii][c];
      }
    }
    if (active) {
      for (int c = 0; c < d; ++c) dk[key * d + c] = store_value<T>(dk_acc[t][c]);
      for (int c = 0; c < dv; ++c) dv_out[key * dv + c] = store_value<T>(dv_acc[t][c]);
    }
  }
}

// Blocks for `tasks` tasks of kRows threads each.
unsigned task_blocks(int64_t tasks) { return blocks_for(tasks * kRows, kRows); }

void check_dims(const char* op, const AttentionShape& sh, int device) {
  RINGGRAD_CHECK(sh.head_dim <= kMaxDim && sh.value_dim <= kMaxDim, op, ": the CUDA kernels take head dims up to ",
                 kMaxDim, ", got head_dim ", sh.head_dim, " and value_dim ", sh.value_dim, " (on cuda:", device, ")");
}

// fn(T{}) for the dtypes the kernels take: float32, bfloat16, float16 (all computed in float32).
template <typename Fn>
void dispatch_attention(const char* op, DType dt, Fn&& fn) {
  RINGGRAD_CHECK(dt != DType::f64, op,
                 ": the CUDA kernels compute in float32 and take float32, bfloat16 or float16, got float64; "
                 "run float64 attention on the CPU");
  dispatch_floating<true>(op, dt, std::forward<Fn>(fn));
}

class CudaAttention final : public AttentionKernels {
 public:
  void forward(DType dt, const void* q, const void* k, const void* v, const KeyPaddingMask& pad, void* out, void* lse,
               const AttentionShape& sh, Stream s) const override {
    if (sh.batch * sh.q_len == 0) return;
    on_stream("attention", s, [&](cudaStream_t st, int device) {
      check_dims("attention", sh, device);
      dispatch_attention("attention", dt, [&](auto zero) {
        using T = decltype(zero);
        if constexpr (!std::is_same_v<T, double>) {
          const int64_t row_blocks = (sh.q_len + kRows - 1) / kRows;
          launch_kernel("attention_forward_kernel", attention_forward_kernel<T>, task_blocks(sh.batch * row_blocks),
                        kRows, 0, st, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), pad,
                        static_cast<T*>(out), static_cast<float*>(lse), sh, row_blocks);
        }
      });
    });
  }

  void backward(DType dt, const void* q, const void* k, const void* v, const KeyPaddingMask& pad, const void* out,
                const void* lse, const void* dout, void* dq, void* dk, void* dv, void* delta, const AttentionShape& sh,
                Stream s) const override {
    on_stream("attention_backward", s, [&](cudaStream_t st, int device) {
      check_dims("attention_backward", sh, device);
      dispatch_attention("attention_backward", dt, [&](auto zero) {
        using T = decltype(zero);
        if constexpr (!std::is_same_v<T, double>) {
          const auto* q_ = static_cast<const T*>(q);
          const auto* k_ = static_cast<const T*>(k);
          const auto* v_ = static_cast<const T*>(v);
          const auto* dout_ = static_cast<const T*>(dout);
          const auto* lse_ = static_cast<const float*>(lse);
          auto* delta_ = static_cast<float*>(delta);
          const int64_t rows = sh.batch * sh.q_len;
          if (rows > 0) {
            launch_kernel("attention_delta_kernel", attention_delta_kernel<T>, blocks_for(rows), kThreads, 0, st,
                          static_cast<const T*>(out), dout_, delta_, rows, static_cast<int>(sh.value_dim));
            const int64_t row_blocks = (sh.q_len + kRows - 1) / kRows;
            launch_kernel("attention_dq_kernel", attention_dq_kernel<T>, task_blocks(sh.batch * row_blocks), kRows, 0,
                          st, q_, k_, v_, pad, lse_, dout_, static_cast<const float*>(delta_), static_cast<T*>(dq), sh,
                          row_blocks);
          }
          const int64_t key_blocks = (sh.kv_len + kRows - 1) / kRows;
          if (sh.batch * key_blocks > 0)
            launch_kernel("attention_dkv_kernel", attention_dkv_kernel<T>, task_blocks(sh.batch * key_blocks), kRows, 0,
                          st, q_, k_, v_, pad, lse_, dout_, static_cast<const float*>(delta_), static_cast<T*>(dk),
                          static_cast<T*>(dv), sh, key_blocks);
        }
      });
    });
  }
};

}  // namespace

RINGGRAD_REGISTER_KERNELS(AttentionKernels, DeviceKind::CUDA, CudaAttention);

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
