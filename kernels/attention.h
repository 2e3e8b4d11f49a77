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
/// which the backward recomputes each p_ij. A key padding mask (KeyPaddingMask) removes keys from
/// every query of a problem; it is one byte per (problem, key), never a [q_len, kv_len] matrix.
///
/// Implemented by kernels/cpu/attention.cpp and kernels/cuda/attention.cu.
#pragma once

#include <cstdint>

#include <ringgrad/core/base/device.h>
#include <ringgrad/core/base/dtype.h>
#include <ringgrad/core/base/strided.h>
#include <ringgrad/kernels/family.h>
#include <ringgrad/kernels/unary_ops.h>  // RINGGRAD_HOST_DEVICE

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

/// Which keys are padding, per problem: key j of problem b takes part in no query's softmax when
/// row(b)[j] is nonzero (PyTorch's key_padding_mask: true = ignore). The rows are uint8 arrays of
/// kv_len bytes, dense along the keys; the problems' leading dims (q's, e.g. [B, H]) reach them
/// through strides that are 0 where the mask broadcasts (a [B, 1, S] mask for every head). A query
/// that sees no key at all -- every visible key padding -- gets out 0 and sends no gradient.
struct KeyPaddingMask {
  const uint8_t* data = nullptr;   ///< null: no key is padding
  int ndim = 0;                    ///< q's leading dims (batch = the product of sizes)
  int64_t sizes[kMaxDims] = {};    ///< q's leading sizes
  int64_t strides[kMaxDims] = {};  ///< the mask's strides along them, in bytes; 0 where broadcast

  /// The mask's row for problem b (b counts the leading dims row-major, as the kernels' batch), or
  /// null without a mask.
  RINGGRAD_HOST_DEVICE const uint8_t* row(int64_t b) const {
    if (data == nullptr) return nullptr;
    int64_t offset = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      offset += (b % sizes[d]) * strides[d];
      b /= sizes[d];
    }
    return data + offset;
  }
};

/// The attention kernels of one backend. Work is queued on `s` (kernels/backend.h's conventions).
struct AttentionKernels {
  static constexpr const char* kName = "attention";
  virtual ~AttentionKernels() = default;

  /// out = softmax(scale q k^T, masked when causal and where `pad` says) v, and lse [batch, q_len] =
  /// the log of each row's softmax denominator (the row maximum included), for the backward; +inf
  /// for a row that sees no key (its out is 0). lse (and the backward's delta) are float64 when dt
  /// is, float32 for every other dtype.
  virtual void forward(DType dt, const void* q, const void* k, const void* v, const KeyPaddingMask& pad, void* out,
                       void* lse, const AttentionShape& shape, Stream s) const = 0;

  /// dq, dk, dv (overwritten) from dout, given the forward's inputs (the same `pad`), out and lse;
  /// padding keys get dk = dv = 0. `delta` is scratch of batch * q_len elements, typed as lse (it
  /// receives dout_i . out_i, which every key's gradient needs).
  virtual void backward(DType dt, const void* q, const void* k, const void* v, const KeyPaddingMask& pad,
                        const void* out, const void* lse, const void* dout, void* dq, void* dk, void* dv, void* delta,
                        const AttentionShape& shape, Stream s) const = 0;
};

}  // namespace kernels
}  // namespace ringgrad
