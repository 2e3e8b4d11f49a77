/// @file
/// nn/transformer.h: the pieces of a GPT-style decoder -- CausalSelfAttention and a pre-LayerNorm
/// TransformerBlock -- laid out and named as nanoGPT's, so that a checkpoint's names match a PyTorch
/// twin of the same model (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj, ln_1, ln_2).
#pragma once

#include <memory>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/nn/activation.h>
#include <ringgrad/nn/layernorm.h>
#include <ringgrad/nn/linear.h>
#include <ringgrad/nn/module.h>

namespace ringgrad {
namespace nn {

/// The sizes of attention and of a block: `TransformerOptions(128, 4).dropout(0.1)`.
struct TransformerOptions {
  TransformerOptions(int64_t embed_dim, int64_t num_heads) : embed_dim_(embed_dim), num_heads_(num_heads) {}
  RINGGRAD_ARG(int64_t, embed_dim);         ///< the width C of each position's vector
  RINGGRAD_ARG(int64_t, num_heads);         ///< heads; each gets embed_dim / num_heads of the width
  RINGGRAD_ARG(double, dropout) = 0.0;      ///< dropout after each residual branch (training only)
  RINGGRAD_ARG(bool, bias) = true;          ///< biases in the Linear layers
  RINGGRAD_ARG(int64_t, mlp_ratio) = 4;     ///< the MLP's hidden width, in multiples of embed_dim
  RINGGRAD_ARG(DType, dtype) = DType::f32;  ///< the parameters' dtype
};

/// Multi-head self-attention in which position t sees positions <= t, as in GPT-2:
/// q, k, v = split(c_attn(x)); y = softmax(q k^T / sqrt(d) + causal mask) v per head; c_proj(y).
/// x is [B, T, C]; attention runs as one fused op (scaled_dot_product_attention).
class CausalSelfAttention : public Cloneable<CausalSelfAttention> {
 public:
  /// @throws ringgrad::Error unless embed_dim and num_heads are positive and num_heads divides embed_dim.
  explicit CausalSelfAttention(const TransformerOptions& options);
  std::string type_name() const override { return "CausalSelfAttention"; }
  Tensor forward(const Tensor& x) override;
  /// With a key padding mask: uint8 [B, T], nonzero where position t is padding, which no position
  /// attends to (nn.MultiheadAttention's key_padding_mask). A position that sees only padding (its
  /// own included) gets attention output 0, not NaN: scaled_dot_product_attention's rule.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask);
  void reset() override;
  void pretty_print(std::ostream& os) const override;

  TransformerOptions options;              ///< as given
  std::shared_ptr<Linear> c_attn;          ///< C -> 3C: q, k and v side by side
  std::shared_ptr<Linear> c_proj;          ///< C -> C: the heads' outputs mixed
  std::shared_ptr<Dropout> resid_dropout;  ///< after c_proj
};

/// The MLP of a block: c_proj(gelu(c_fc(x))), with exact (erf) GELU as nanoGPT's nn.GELU().
class TransformerMLP : public Cloneable<TransformerMLP> {
 public:
  explicit TransformerMLP(const TransformerOptions& options);
  std::string type_name() const override { return "TransformerMLP"; }
  Tensor forward(const Tensor& x) override;
  void reset() override;

  TransformerOptions options;      ///< as given
  std::shared_ptr<Linear> c_fc;    ///< C -> mlp_ratio C
  std::shared_ptr<Linear> c_proj;  ///< mlp_ratio C -> C
  std::shared_ptr<Dropout> dropout;
};

/// A pre-LayerNorm block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)), as GPT-2.
class TransformerBlock : public Cloneable<TransformerBlock> {
 public:
  explicit TransformerBlock(const TransformerOptions& options);
  std::string type_name() const override { return "TransformerBlock"; }
  Tensor forward(const Tensor& x) override;
  /// With a key padding mask [B, T] for the attention (CausalSelfAttention::forward(x, mask)).
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask);
  void reset() override;

  TransformerOptions options;  ///< as given
  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<LayerNorm> ln_2;
  std::shared_ptr<TransformerMLP> mlp;
};

}  // namespace nn
}  // namespace ringgrad
