/// @file
/// nn/embedding.h: Embedding, a learned table of vectors looked up by int64 index (token ids).
#pragma once

#include <optional>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/nn/module.h>

namespace ringgrad {
namespace nn {

/// An Embedding's table size and extras: `EmbeddingOptions(256, 128).padding_idx(0)`.
struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  RINGGRAD_ARG(int64_t, num_embeddings);  ///< rows of the table: the number of distinct indices
  RINGGRAD_ARG(int64_t, embedding_dim);   ///< the length of each vector
  /// A row that gets no gradient and starts at zero (negative counts from the end), as PyTorch's.
  RINGGRAD_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
  RINGGRAD_ARG(DType, dtype) = DType::f32;  ///< the table's dtype
};

/// y = weight[indices]: indices of any shape give vectors of shape indices.shape + [embedding_dim],
/// as torch.nn.Embedding. The backward adds each position's gradient into its row in a fixed order
/// (core/ops.h, embedding), so training gives the same bits run after run.
class Embedding : public Cloneable<Embedding> {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim)
      : Embedding(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  /// Creates the table (reset()); throws unless both sizes are > 0 and padding_idx names a row.
  explicit Embedding(const EmbeddingOptions& options);

  std::string type_name() const override { return "Embedding"; }
  Tensor forward(const Tensor& indices) override;
  /// PyTorch's init: weight ~ N(0, 1), the padding row zero.
  void reset() override;
  void pretty_print(std::ostream& os) const override;

  EmbeddingOptions options;  ///< as given
  Tensor weight;             ///< (num_embeddings, embedding_dim), same layout as PyTorch
};

}  // namespace nn
}  // namespace ringgrad
