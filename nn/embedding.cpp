// nn/embedding.cpp: Embedding's table and lookup.
#include <ringgrad/nn/embedding.h>

#include <ostream>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace nn {

Embedding::Embedding(const EmbeddingOptions& opts) : options(opts) {
  const int64_t rows = opts.num_embeddings();
  RINGGRAD_CHECK(rows > 0 && opts.embedding_dim() > 0, "Embedding: expected positive sizes, got num_embeddings=", rows,
                 " and embedding_dim=", opts.embedding_dim());
  if (const std::optional<int64_t> pad = opts.padding_idx()) {
    RINGGRAD_CHECK(*pad >= -rows && *pad < rows, "Embedding: expected padding_idx in [", -rows, ", ", rows - 1,
                   "], got ", *pad);
    options.padding_idx(*pad < 0 ? *pad + rows : *pad);
  }
  reset();
}

void Embedding::reset() {
  Tensor table = randn({options.num_embeddings(), options.embedding_dim()}, TensorOptions(options.dtype()));
  if (const std::optional<int64_t> pad = options.padding_idx()) {
    NoGradGuard no_grad;
    table.narrow(0, *pad, 1).copy_(zeros({1, options.embedding_dim()}, TensorOptions(options.dtype())));
  }
  weight = register_parameter("weight", table);
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight, options.padding_idx()); }

void Embedding::pretty_print(std::ostream& os) const {
  os << "Embedding(" << options.num_embeddings() << ", " << options.embedding_dim();
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  os << ')';
}

}  // namespace nn
}  // namespace ringgrad
