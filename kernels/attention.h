/// @file
/// kernels/attention.h: the attention family -- scaled dot-product attention, forward and backward,
/// fused: the kernels behind scaled_dot_product_attention (core/ops/attention.cpp).
///
///   out_i = sum_j p_ij v_j,   p_ij = softmax_j(scale q_i . k_j)  over the keys query i may see
///
/// For each of `batch` independent problems (batch x heads in a transformer), q is [q_len, head_dim],
/// k is [kv_len, head_dim], v is [kv_len, value_dim] and out is [q_len, value_dim], all dense. With
/// `causal`, query i sees keys j <= i (top-left aligned, as PyTorch's is_causal). The softmax is
/// computed online -- a running maximum and sum per query row -- so no [q_len, kv_len] matrix of
/// scores or probabilities is ever stored: the forward keeps only lse_i = log sum_j e^(s_ij), from
/// which the backward recomputes each p_ij.
///
/// Implemented by kernels/cpu/attention.cpp and kernels/cuda/attention.cu.
#pragma once

#include <cstdint>

#include <ringgrad/core/base/device.h>
#include <ringgrad/core/base/dtype.h>
#include <ringgrad/kernels/family.h>

namespace ringgrad {
namespace kernels {

/// The sizes of one attention call.
struct AttentionShape {
  int64_t batch = 1;      ///< independent problems (the product of the leading dims)
  int64_t q_len = 0;      ///< rows of q and out
  int64_t kv_len = 0;     ///< rows of k and v (at least 1 when q_len > 0)
  int64_t head_dim = 0;   ///< columns of q and k
  int64_t value_dim = 0;  ///< columns of v and out
  double scale = 1.0;     ///< multiplies q . k (1 / sqrt(head_dim) by default, in the op)
  bool causal = false;    ///< query i sees keys j <= i only
};

/// The attention kernels of one backend. Work is queued on `s` (kernels/backend.h's conventions).
struct AttentionKernels {
  static constexpr const char* kName = "attention";
  virtual ~AttentionKernels() = default;

  /// out = softmax(scale q k^T, masked when causal) v, and lse [batch, q_len] = the log of each
  /// row's softmax denominator (the row maximum included), for the backward. lse (and the
  /// backward's delta) are float64 when dt is, float32 for every other dtype.
  virtual void forward(DType dt, const void* q, const void* k, const void* v, void* out, void* lse,
                       const AttentionShape& shape, Stream s) const = 0;

  /// dq, dk, dv (overwritten) from dout, given the forward's inputs, out and lse. `delta` is scratch
  /// of batch * q_len elements, typed as lse (it receives dout_i . out_i, which every key's gradient
  /// needs).
  virtual void backward(DType dt, const void* q, const void* k, const void* v, const void* out, const void* lse,
                        const void* dout, void* dq, void* dk, void* dv, void* delta, const AttentionShape& shape,
                        Stream s) const = 0;
};

}  // namespace kernels
}  // namespace ringgrad
