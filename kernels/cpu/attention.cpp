// kernels/cpu/attention.cpp: the CPU's fused attention (kernels/attention.h).
//
// Budget : per problem 2 T S d FLOPs for the scores and 2 T S dv for the weighted sum (half of each
//          when causal), and one exp per score; the backward recomputes the scores and adds about
//          three times as much again. Memory: q, k, v, out read or written a small number of times,
//          no T x S matrix -- so this is bound by the FLOPs of its dot products.
//          The key padding mask adds one byte read per score: a padding key is skipped before its dot
//          product, so padding costs nothing beyond that byte.
// Mapping: the forward and the query half of the backward give each query row to one loop
//          iteration, the key half (dk, dv) each key row; rows are split across threads, so every
//          output row is computed in one fixed order whatever the thread count. The output row
//          itself is the running accumulator: the kernels allocate nothing.
// Limitation: plain dot-product loops, not GEMMs: at large T this is slower than scores through
//          the GEMM (which needs the T x S matrix this avoids).
#include <algorithm>
#include <cmath>
#include <limits>

#include <ringgrad/kernels/attention.h>
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/thread_pool.h"

namespace ringgrad {
namespace kernels {
namespace cpu {
namespace {

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// Keys query i may see: [0, kv_len), or [0, min(i + 1, kv_len)) when causal (less the padding ones,
// which the loops skip).
int64_t visible_keys(const AttentionShape& sh, int64_t i) { return sh.causal ? std::min(i + 1, sh.kv_len) : sh.kv_len; }

// Rows per part so that a part does about kGrain multiply-adds.
int64_t rows_grain(const AttentionShape& sh) {
  const int64_t per_row = std::max<int64_t>(1, sh.kv_len * (sh.head_dim + sh.value_dim));
  return std::max<int64_t>(1, kGrain / per_row);
}

template <typename T>
void forward_typed(const T* q, const T* k, const T* v, const KeyPaddingMask& pad, T* out, T* lse,
                   const AttentionShape& sh) {
  const int64_t d = sh.head_dim, dv = sh.value_dim;
  const T scale = static_cast<T>(sh.scale);
  parallel_range(sh.batch * sh.q_len, rows_grain(sh), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / sh.q_len, i = row - b * sh.q_len;
      const T* qi = q + row * d;
      const T* kb = k + b * sh.kv_len * d;
      const T* vb = v + b * sh.kv_len * dv;
      const uint8_t* padding = pad.row(b);
      T* acc = out + row * dv;
      std::fill(acc, acc + dv, T(0));
      T m = -std::numeric_limits<T>::infinity(), l = 0;
      for (int64_t j = 0, keys = visible_keys(sh, i); j < keys; ++j) {
        if (padding != nullptr && padding[j] != 0) continue;
        const T s = scale * dot(qi, kb + j * d, d);
        if (s > m) {  // a new maximum: rescale what was summed against the old one
          const T factor = std::exp(m - s);
          for (int64_t c = 0; c < dv; ++c) acc[c] *= factor;
          l *= factor;
          m = s;
        }
        const T p = std::exp(s - m);
        l += p;
        const T* vj = vb + j * dv;
        for (int64_t c = 0; c < dv; ++c) acc[c] += p * vj[c];
      }
      if (l == 0) {  // every key it may see is padding: out stays 0, and lse = +inf would make any p 0
        lse[row] = std::numeric_limits<T>::infinity();
        continue;
      }
      for (int64_t c = 0; c < dv; ++c) acc[c] /= l;
      lse[row] = m + std::log(l);
    }
  });
}

template <typename T>
void backward_typed(const T* q, const T* k, const T* v, const KeyPaddingMask& pad, const T* out, const T* lse,
                    const T* dout, T* dq, T* dk, T* dv_, T* delta, const AttentionShape& sh) {
  const int64_t d = sh.head_dim, dv = sh.value_dim;
  const T scale = static_cast<T>(sh.scale);
  // delta_i = dout_i . out_i: the softmax backward's row term, dS_ij = p_ij (dp_ij - delta_i).
  parallel_range(sh.batch * sh.q_len, std::max<int64_t>(1, kGrain / std::max<int64_t>(dv, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t row = begin; row < end; ++row) delta[row] = dot(dout + row * dv, out + row * dv, dv);
                 });
  // dq_i = scale sum_j dS_ij k_j, one query row per iteration.
  parallel_range(sh.batch * sh.q_len, rows_grain(sh), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / sh.q_len, i = row - b * sh.q_len;
      const T* qi = q + row * d;
      const T* doi = dout + row * dv;
      const uint8_t* padding = pad.row(b);
      T* dqi = dq + row * d;
      std::fill(dqi, dqi + d, T(0));
      for (int64_t j = 0, keys = visible_keys(sh, i); j < keys; ++j) {
        if (padding != nullptr && padding[j] != 0) continue;
        const T* kj = k + (b * sh.kv_len + j) * d;
        const T p = std::exp(scale * dot(qi, kj, d) - lse[row]);
        const T ds = p * (dot(doi, v + (b * sh.kv_len + j) * dv, dv) - delta[row]);
        for (int64_t c = 0; c < d; ++c) dqi[c] += scale * ds * kj[c];
      }
    }
  });
  // dv_j = sum_i p_ij dout_i and dk_j = scale sum_i dS_ij q_i, one key row per iteration, over the
  // queries that see key j (i >= j when causal; none when it is padding). A query that sees no key
  // at all sees no key j either, so its lse (+inf) is never read here.
  parallel_range(sh.batch * sh.kv_len, rows_grain(sh), [&](int64_t begin, int64_t end) {
    for (int64_t key = begin; key < end; ++key) {
      const int64_t b = key / sh.kv_len, j = key - b * sh.kv_len;
      const T* kj = k + key * d;
      const T* vj = v + key * dv;
      T* dkj = dk + key * d;
      T* dvj = dv_ + key * dv;
      std::fill(dkj, dkj + d, T(0));
      std::fill(dvj, dvj + dv, T(0));
      const uint8_t* padding = pad.row(b);
      if (padding != nullptr && padding[j] != 0) continue;
      for (int64_t i = sh.causal ? j : 0; i < sh.q_len; ++i) {
        const int64_t row = b * sh.q_len + i;
        const T* qi = q + row * d;
        const T* doi = dout + row * dv;
        const T p = std::exp(scale * dot(qi, kj, d) - lse[row]);
        const T ds = p * (dot(doi, vj, dv) - delta[row]);
        for (int64_t c = 0; c < dv; ++c) dvj[c] += p * doi[c];
        for (int64_t c = 0; c < d; ++c) dkj[c] += scale * ds * qi[c];
      }
    }
  });
}

class CpuAttention final : public AttentionKernels {
 public:
  void forward(DType dt, const void* q, const void* k, const void* v, const KeyPaddingMask& pad, void* out, void* lse,
               const AttentionShape& sh, Stream) const override {
    dispatch_floating("attention", dt, [&](auto zero) {
      using T = decltype(zero);
      forward_typed(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), pad,
                    static_cast<T*>(out), static_cast<T*>(lse), sh);
    });
  }

  void backward(DType dt, const void* q, const void* k, const void* v, const KeyPaddingMask& pad, const void* out,
                const void* lse, const void* dout, void* dq, void* dk, void* dv, void* delta, const AttentionShape& sh,
                Stream) const override {
    dispatch_floating("attention_backward", dt, [&](auto zero) {
      using T = decltype(zero);
      backward_typed(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), pad,
                     static_cast<const T*>(out), static_cast<const T*>(lse), static_cast<const T*>(dout),
                     static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv), static_cast<T*>(delta), sh);
    });
  }
};

}  // namespace

RINGGRAD_REGISTER_KERNELS(AttentionKernels, DeviceKind::CPU, CpuAttention);

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
