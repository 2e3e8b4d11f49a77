// tests/nn/test_transformer.cpp: CausalSelfAttention, TransformerMLP and TransformerBlock -- their
// computation against the same formulas written out with core ops, causality, gradients, names.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <ringgrad/core/gradcheck.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/transformer.h>

#include "test_util.h"

using namespace ringgrad;

namespace {

// GPT-2's attention written out: one matmul per step, the [T, T] mask materialised (with the key
// padding mask [B, T], if given, expanded to [B, 1, T, T]).
Tensor written_out_attention(const nn::CausalSelfAttention& a, const Tensor& x,
                             const Tensor& key_padding_mask = Tensor()) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), h = a.options.num_heads();
  const Tensor qkv = linear(x, a.c_attn->weight, a.c_attn->bias);
  auto head = [&](int64_t part) {
    return qkv.narrow(2, part * c, c).reshape({b, t, h, c / h}).transpose(1, 2);  // [B, H, T, d]
  };
  const Tensor scores = matmul(head(0), head(1).transpose(2, 3)) / std::sqrt(static_cast<double>(c / h));
  Tensor hidden = triu(ones({t, t}, DType::u8), 1);
  if (key_padding_mask.defined())
    hidden = gt(hidden.to(DType::f64) + key_padding_mask.to(DType::f64).view({b, 1, 1, t}), 0.0);
  const Tensor y = matmul(softmax(masked_fill(scores, hidden, -INFINITY), -1), head(2));
  return linear(y.transpose(1, 2).reshape({b, t, c}), a.c_proj->weight, a.c_proj->bias);
}

}  // namespace

TEST_CASE("CausalSelfAttention: equals GPT-2's attention written out with core ops", "[nn][transformer]") {
  manual_seed(1);
  nn::CausalSelfAttention attn(nn::TransformerOptions(12, 3).dtype(DType::f64));
  const Tensor x = randn({2, 5, 12}, DType::f64, 2);
  const std::vector<double> got = attn.forward(x).to_vector<double>();
  const std::vector<double> want = written_out_attention(attn, x).to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-12));
}

TEST_CASE("CausalSelfAttention: a key padding mask hides padding positions, as written out", "[nn][transformer]") {
  manual_seed(9);
  auto block = std::make_shared<nn::TransformerBlock>(nn::TransformerOptions(12, 3).dtype(DType::f64));
  const nn::CausalSelfAttention& attn = *block->attn;
  const Tensor x = randn({2, 5, 12}, DType::f64, 10);
  // Batch 0 unpadded; batch 1 has padding at positions 1 and 4.
  const Tensor mask = from_vector(std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 1, 0, 0, 1}, {2, 5});
  const std::vector<double> got = block->attn->forward(x, mask).to_vector<double>();
  const std::vector<double> want = written_out_attention(attn, x, mask).to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-12));
  // A padding position's input changes no other position's output, though later ones would see it.
  Tensor changed = x.clone();
  changed.narrow(0, 1, 1).narrow(1, 1, 1).copy_(randn({1, 1, 12}, DType::f64, 11));
  const Tensor before = block->forward(x, mask).narrow(0, 1, 1), after = block->forward(changed, mask).narrow(0, 1, 1);
  CHECK(before.narrow(1, 0, 1).to_vector<double>() == after.narrow(1, 0, 1).to_vector<double>());
  CHECK(before.narrow(1, 2, 3).to_vector<double>() == after.narrow(1, 2, 3).to_vector<double>());
  CHECK(block->forward(changed).narrow(0, 1, 1).narrow(1, 2, 3).to_vector<double>() !=
        block->forward(x).narrow(0, 1, 1).narrow(1, 2, 3).to_vector<double>());
  // An undefined mask is no mask.
  CHECK(block->forward(x, Tensor()).to_vector<double>() == block->forward(x).to_vector<double>());
  CHECK_ERROR(block->attn->forward(x, zeros({2, 1, 5}, DType::u8)), "CausalSelfAttention", "key_padding_mask", "[2, 5]",
              "[2, 1, 5]");
}

TEST_CASE("CausalSelfAttention: a position's output does not depend on later positions", "[nn][transformer]") {
  manual_seed(3);
  nn::CausalSelfAttention attn(nn::TransformerOptions(8, 2));
  const Tensor x = randn({1, 6, 8}, DType::f32, 4);
  Tensor changed = x.clone();
  changed.narrow(1, 4, 2).copy_(randn({1, 2, 8}, DType::f32, 5));  // positions 4 and 5 only
  const Tensor a = attn.forward(x).narrow(1, 0, 4), b = attn.forward(changed).narrow(1, 0, 4);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(attn.forward(x).narrow(1, 4, 1).to_vector<float>() != attn.forward(changed).narrow(1, 4, 1).to_vector<float>());
}

TEST_CASE("TransformerBlock: nanoGPT's parameter names, pre-LayerNorm residuals, gradients",
          "[nn][transformer][grad]") {
  manual_seed(6);
  auto block = std::make_shared<nn::TransformerBlock>(nn::TransformerOptions(8, 2));
  std::vector<std::string> names;
  for (const auto& [name, p] : block->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                          "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"});
  CHECK(block->mlp->c_fc->weight.shape() == Shape{32, 8});
  block->to(DType::f64);
  for (const auto& [name, p] : nn::TransformerBlock(nn::TransformerOptions(8, 2).dtype(DType::f64)).named_parameters())
    CHECK(p.dtype() == DType::f64);  // the LayerNorms too
  // x + attn(ln_1(x)), then + mlp(ln_2(.)), against the block's own pieces.
  const Tensor x = randn({2, 3, 8}, DType::f64, 7);
  const Tensor h = x + block->attn->forward(block->ln_1->forward(x));
  const Tensor want = h + block->mlp->forward(block->ln_2->forward(h));
  CHECK(block->forward(x).to_vector<double>() == want.to_vector<double>());
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return block->forward(in[0]); },
                  {randn({2, 3, 8}, DType::f64, 8).requires_grad_(true)});
  // A clone computes the same, with its own parameters.
  const auto copy = std::dynamic_pointer_cast<nn::TransformerBlock>(block->clone());
  REQUIRE(copy != nullptr);
  CHECK(copy->forward(x).to_vector<double>() == block->forward(x).to_vector<double>());
  CHECK(copy->attn->c_attn->weight.data() != block->attn->c_attn->weight.data());
}

TEST_CASE("transformer modules: bad sizes and inputs are errors naming the module", "[nn][transformer]") {
  CHECK_ERROR(nn::CausalSelfAttention(nn::TransformerOptions(10, 3)), "CausalSelfAttention", "embed_dim=10",
              "num_heads=3");
  nn::CausalSelfAttention attn(nn::TransformerOptions(8, 2));
  CHECK_ERROR(attn.forward(randn({2, 8}, DType::f32, 1)), "CausalSelfAttention", "[B, T, 8]", "[2, 8]");
  CHECK_ERROR(attn.forward(randn({2, 3, 6}, DType::f32, 1)), "[2, 3, 6]");
}
