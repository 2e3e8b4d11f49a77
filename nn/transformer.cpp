// nn/transformer.cpp: CausalSelfAttention, TransformerMLP and TransformerBlock.
#include <ringgrad/nn/transformer.h>

#include <ostream>

#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace nn {
namespace {

LinearOptions linear_options(const TransformerOptions& o, int64_t in, int64_t out) {
  return LinearOptions(in, out).bias(o.bias()).dtype(o.dtype());
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const TransformerOptions& opts) : options(opts) {
  RINGGRAD_CHECK(opts.embed_dim() > 0 && opts.num_heads() > 0 && opts.embed_dim() % opts.num_heads() == 0,
                 "CausalSelfAttention: expected num_heads > 0 dividing embed_dim > 0, got embed_dim=", opts.embed_dim(),
                 " and num_heads=", opts.num_heads());
  reset();
}

void CausalSelfAttention::reset() {
  const int64_t c = options.embed_dim();
  c_attn = register_module("c_attn", std::make_shared<Linear>(linear_options(options, c, 3 * c)));
  c_proj = register_module("c_proj", std::make_shared<Linear>(linear_options(options, c, c)));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(options.dropout()));
}

Tensor CausalSelfAttention::forward(const Tensor& x) { return forward(x, Tensor()); }

Tensor CausalSelfAttention::forward(const Tensor& x, const Tensor& key_padding_mask) {
  RINGGRAD_CHECK(x.dim() == 3 && x.size(2) == options.embed_dim(), "CausalSelfAttention: expected x of shape [B, T, ",
                 options.embed_dim(), "], got ", x.shape());
  const int64_t b = x.size(0), t = x.size(1), c = options.embed_dim(), h = options.num_heads();
  // [B, T] -> [B, 1, T]: one mask row for every head.
  Tensor mask;
  if (key_padding_mask.defined()) {
    RINGGRAD_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == b && key_padding_mask.size(1) == t,
                   "CausalSelfAttention: expected key_padding_mask of shape [", b, ", ", t, "] (x's [B, T]), got ",
                   key_padding_mask.shape());
    mask = key_padding_mask.unsqueeze(1);
  }
  // [B, T, 3C] -> three [B, T, C] views -> [B, H, T, C/H] each (the head dim moves before time).
  const std::vector<Tensor> qkv = chunk(c_attn->forward(x), 3, -1);
  auto heads = [&](const Tensor& part) { return part.view({b, t, h, c / h}).transpose(1, 2); };
  const Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), mask, /*causal=*/true);
  return resid_dropout->forward(c_proj->forward(y.transpose(1, 2).reshape({b, t, c})));
}

void CausalSelfAttention::pretty_print(std::ostream& os) const {
  os << "CausalSelfAttention(embed_dim=" << options.embed_dim() << ", num_heads=" << options.num_heads() << ')';
}

TransformerMLP::TransformerMLP(const TransformerOptions& opts) : options(opts) {
  RINGGRAD_CHECK(opts.embed_dim() > 0 && opts.mlp_ratio() > 0, "TransformerMLP: expected positive embed_dim and ",
                 "mlp_ratio, got ", opts.embed_dim(), " and ", opts.mlp_ratio());
  reset();
}

void TransformerMLP::reset() {
  const int64_t c = options.embed_dim(), hidden = options.mlp_ratio() * c;
  c_fc = register_module("c_fc", std::make_shared<Linear>(linear_options(options, c, hidden)));
  c_proj = register_module("c_proj", std::make_shared<Linear>(linear_options(options, hidden, c)));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout()));
}

Tensor TransformerMLP::forward(const Tensor& x) { return dropout->forward(c_proj->forward(gelu(c_fc->forward(x)))); }

TransformerBlock::TransformerBlock(const TransformerOptions& opts) : options(opts) { reset(); }

void TransformerBlock::reset() {
  const int64_t c = options.embed_dim();
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(options));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c));
  mlp = register_module("mlp", std::make_shared<TransformerMLP>(options));
  ln_1->to(options.dtype());  // LayerNorm makes float32 parameters; the block's dtype is the options'
  ln_2->to(options.dtype());
}

Tensor TransformerBlock::forward(const Tensor& x) { return forward(x, Tensor()); }

Tensor TransformerBlock::forward(const Tensor& x, const Tensor& key_padding_mask) {
  const Tensor h = x + attn->forward(ln_1->forward(x), key_padding_mask);
  return h + mlp->forward(ln_2->forward(h));
}

}  // namespace nn
}  // namespace ringgrad
