// examples/gpt/model.h: a GPT-2-style decoder over bytes, as a user would write it with nn/.
//
//   tokens [B, T] (int64 bytes) -> wte(tokens) + wpe(positions) -> blocks h.0 ... h.L-1 -> ln_f
//   -> logits [B, T, 256] = x wte.weight^T
//
// The output layer reuses the token embedding's table (weight tying, as GPT-2 and nanoGPT): the
// model has no lm_head of its own, so the table is one parameter, stepped once and all-reduced once.
// Names follow nanoGPT without its "transformer." prefix (wte, wpe, h.0.attn.c_attn, ln_f), which
// is what examples/gpt/torch_gpt.py maps when it loads a checkpoint into the same model in PyTorch.
#pragma once

#include <ringgrad/ringgrad.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

namespace gpt {

using namespace ringgrad;

struct Config {
  int64_t vocab = 256;  // bytes
  int64_t context = 64;
  int64_t layers = 2;
  int64_t width = 128;
  int64_t heads = 4;
  double dropout = 0.0;
};

class Gpt : public nn::Cloneable<Gpt> {
 public:
  explicit Gpt(const Config& c) : config(c) { reset(); }

  std::string type_name() const override { return "Gpt"; }

  void reset() override {
    wte = register_module("wte", std::make_shared<nn::Embedding>(config.vocab, config.width));
    wpe = register_module("wpe", std::make_shared<nn::Embedding>(config.context, config.width));
    h = register_module("h", std::make_shared<nn::Sequential>());
    const auto options = nn::TransformerOptions(config.width, config.heads).dropout(config.dropout);
    for (int64_t i = 0; i < config.layers; ++i) h->push_back(std::make_shared<nn::TransformerBlock>(options));
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(config.width));
    init_weights();
  }

  // tokens [B, T] int64, T <= context -> logits [B, T, vocab].
  Tensor forward(const Tensor& tokens) override {
    RINGGRAD_CHECK(tokens.dim() == 2 && tokens.size(1) <= config.context,
                   "Gpt: expected tokens [B, T] with T <= ", config.context, ", got ", tokens.shape());
    const Tensor positions = arange(tokens.size(1), TensorOptions(DType::i64).device(tokens.device()));
    const Tensor x = ln_f->forward(h->forward(wte->forward(tokens) + wpe->forward(positions)));
    return linear(x, wte->weight);  // tied: the logits are scores against every byte's embedding
  }

  Config config;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Sequential> h;
  std::shared_ptr<nn::LayerNorm> ln_f;

 private:
  // GPT-2's initialisation: weights N(0, 0.02), biases 0, and the projections that end each residual
  // branch (c_proj) N(0, 0.02 / sqrt(2 layers)), so the residual stream's variance does not grow
  // with depth. Drawn from the default generator: manual_seed() makes a model repeatable.
  void init_weights() {
    NoGradGuard no_grad;
    const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.layers));
    for (const auto& [name, p] : named_parameters()) {
      const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
      const bool is_norm = name.find("ln_") != std::string::npos;
      if (is_norm) continue;  // LayerNorm: weight 1, bias 0 already
      if (is_bias) {
        p.copy_(zeros_like(p));
      } else {
        const bool is_proj = name.find("c_proj.weight") != std::string::npos;
        p.copy_(randn(p.shape(), TensorOptions(p.dtype())) * (is_proj ? proj_std : 0.02));
      }
    }
  }
};

}  // namespace gpt
