// core/ops/attention.cpp: scaled_dot_product_attention, forward and backward as one op, on the fused
// kernels of kernels/attention.h.
//
//   out = softmax(scale q k^T + causal mask + key padding mask) v
//   dv = p^T dout      dp = dout v^T      ds = p (dp - rowsum(dout out))      dq = scale ds k      dk = scale ds^T q
//
// The composed version (matmul, masked_fill, softmax, matmul) stores the [T, S] scores and
// probabilities of every head for the backward; this op stores one number per query row (lse) and
// recomputes the probabilities, so attention's memory grows with T, not T^2. The key padding mask
// stays [..., S] bytes: the kernels read it per key, where the composed version expands it to [T, S].
#include <cmath>
#include <optional>

#include <ringgrad/kernels/attention.h>
#include "core/ops/op_utils.h"

namespace ringgrad {
namespace {

using kernels::AttentionKernels;
using kernels::AttentionShape;
using kernels::KeyPaddingMask;

const AttentionKernels& attention_of(const Tensor& t, const char* op) {
  return kernels::kernels_for<AttentionKernels>(t.device().kind, op);
}

// The dtype of lse and delta: float64 for float64 inputs, float32 for the others.
DType row_term_dtype(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

// The kernels' view of key_padding_mask (undefined: none) for q's leading dims: checked, with stride 0
// where it broadcasts. `dense` keeps a copy alive when the mask's keys were not adjacent in memory.
KeyPaddingMask padding_of(const char* op, const Tensor& mask, const Tensor& q, int64_t kv_len, Tensor& dense) {
  KeyPaddingMask pad;
  if (!mask.defined()) return pad;
  const int64_t lead = q.dim() - 2;
  RINGGRAD_CHECK(mask.dtype() == DType::u8, op, ": expected key_padding_mask of dtype uint8 (nonzero = padding, ",
                 "what eq..ge make), got ", mask.dtype());
  RINGGRAD_CHECK(mask.device() == q.device(), op, ": expected key_padding_mask on ", q.device(), " (q's device), got ",
                 mask.device(), "; call key_padding_mask.to(Device::", q.device().is_cpu() ? "cpu(" : "cuda(",
                 q.device().index, "))");
  // The same number of leading dims as q, not right-aligned broadcasting: a [B, S] mask against
  // q [B, H, T, d] would line B up with H.
  RINGGRAD_CHECK(mask.dim() == lead + 1, op, ": expected key_padding_mask with ", lead + 1, " dims ([..., S], q's ",
                 lead, " leading dims, each equal or 1), got shape ", mask.shape(), " for q ", q.shape(),
                 "; for q [B, H, T, d] pass a [B, S] mask as mask.view({B, 1, S})");
  RINGGRAD_CHECK(mask.shape()[lead] == kv_len, op, ": expected key_padding_mask's last dim ", kv_len,
                 " (the number of keys), got ", mask.shape()[lead]);
  for (int64_t d = 0; d < lead; ++d)
    RINGGRAD_CHECK(mask.shape()[d] == q.shape()[d] || mask.shape()[d] == 1, op,
                   ": expected key_padding_mask's leading dims to equal q's or be 1, got ", mask.shape(), " for q ",
                   q.shape(), " (dim ", d, ")");
  dense = mask.stride(lead) == 1 || kv_len == 1 ? mask : mask.contiguous();
  pad.data = static_cast<const uint8_t*>(dense.data());
  pad.ndim = static_cast<int>(lead);
  for (int64_t d = 0; d < lead; ++d) {
    pad.sizes[d] = q.shape()[d];
    pad.strides[d] = dense.shape()[d] == 1 ? 0 : dense.stride(d);
  }
  return pad;
}

struct AttentionBackward final : Node {
  SavedTensor q, k, v, out, lse;  // dense
  SavedTensor mask;               // keeps pad.data alive (undefined: no mask)
  KeyPaddingMask pad;
  AttentionShape shape;
  const char* name() const override { return "ScaledDotProductAttentionBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor dout = g[0].contiguous();
    const Tensor &q0 = q.unpack(), &k0 = k.unpack(), &v0 = v.unpack();
    Tensor dq = empty_like(q0), dk = empty_like(k0), dv = empty_like(v0);
    const Tensor delta = empty({shape.batch, shape.q_len}, TensorOptions(lse.unpack().dtype()).device(q0.device()));
    if (dq.numel() + dk.numel() + dv.numel() > 0)
      attention_of(q0, name())
          .backward(q0.dtype(), q0.data(), k0.data(), v0.data(), pad, out.unpack().data(), lse.unpack().data(),
                    dout.data(), dq.data(), dk.data(), dv.data(), delta.data(), shape, ops::stream_of(q0));
    return {dq, dk, dv};
  }
};

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    std::optional<double> scale) {
  return scaled_dot_product_attention(q, k, v, Tensor(), causal, scale);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding_mask,
                                    bool causal, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  ops::check_floating(op, q, "q");
  ops::check_defined(op, k, "k");
  ops::check_defined(op, v, "v");
  ops::check_same(op, q, k, "q", "k");
  ops::check_same(op, q, v, "q", "v");
  RINGGRAD_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op,
                 ": expected q, k and v with the same number of dimensions, at least 2 ([..., rows, dim]), got ",
                 q.shape(), ", ", k.shape(), " and ", v.shape());
  const int64_t nd = q.dim();
  for (int64_t d = 0; d + 2 < nd; ++d) {
    RINGGRAD_CHECK(k.shape()[d] == q.shape()[d] && v.shape()[d] == q.shape()[d], op,
                   ": expected the same leading (batch, head) dims in q, k and v, got ", q.shape(), ", ", k.shape(),
                   " and ", v.shape());
  }
  AttentionShape sh;
  sh.q_len = q.shape()[nd - 2];
  sh.kv_len = k.shape()[nd - 2];
  sh.head_dim = q.shape()[nd - 1];
  sh.value_dim = v.shape()[nd - 1];
  sh.batch = 1;
  for (int64_t d = 0; d + 2 < nd; ++d) sh.batch *= q.shape()[d];
  sh.causal = causal;
  RINGGRAD_CHECK(k.shape()[nd - 1] == sh.head_dim, op, ": expected k's last dim ", sh.head_dim, " (q's head dim), got ",
                 k.shape()[nd - 1]);
  RINGGRAD_CHECK(v.shape()[nd - 2] == sh.kv_len, op, ": expected v with ", sh.kv_len, " rows (k's), got ",
                 v.shape()[nd - 2]);
  RINGGRAD_CHECK(sh.kv_len > 0 || sh.q_len == 0 || sh.batch == 0, op, ": expected at least one key for the ", sh.q_len,
                 " queries, got k of shape ", k.shape());
  RINGGRAD_CHECK(sh.head_dim > 0 || scale, op, ": a head dim of 0 has no default scale 1/sqrt(0); pass one");
  sh.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(sh.head_dim));
  Tensor mask;
  const KeyPaddingMask pad = padding_of(op, key_padding_mask, q, sh.kv_len, mask);

  Shape out_shape = q.shape();
  out_shape[nd - 1] = sh.value_dim;
  const Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  Tensor out = empty(out_shape, TensorOptions(q.dtype()).device(q.device()));
  const Tensor lse = empty({sh.batch, sh.q_len}, TensorOptions(row_term_dtype(q.dtype())).device(q.device()));
  // Also when value_dim is 0 (out is empty): the backward still needs lse for dq and dk.
  if (sh.batch * sh.q_len > 0)
    attention_of(q, op).forward(q.dtype(), qc.data(), kc.data(), vc.data(), pad, out.data(), lse.data(), sh,
                                ops::stream_of(q));
  if (needs_grad(std::vector<Tensor>{q, k, v})) {
    auto& node = record<AttentionBackward>(out, {q, k, v});
    node.q = save(qc);
    node.k = save(kc);
    node.v = save(vc);
    node.out = save(out);
    node.lse = save(lse);
    if (mask.defined()) node.mask = save(mask);
    node.pad = pad;
    node.shape = sh;
  }
  return out;
}

}  // namespace ringgrad
