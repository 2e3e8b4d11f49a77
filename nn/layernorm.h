/// @file
/// nn/layernorm.h: LayerNorm over the last dimension, with a learnable scale and shift.
#pragma once

#include <ringgrad/nn/module.h>

namespace ringgrad {
namespace nn {

/// Layer normalisation over the last dimension (layer_norm), as torch.nn.LayerNorm with one
/// normalized dimension.
class LayerNorm : public Cloneable<LayerNorm> {
 public:
  /// normalized_size: C, the size of the last dimension (> 0, else throws); with elementwise_affine,
  /// a learned weight and bias of C values each.
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true);

  std::string type_name() const override { return "LayerNorm"; }
  Tensor forward(const Tensor& x) override;
  void reset() override;  ///< weight = 1, bias = 0, as in PyTorch
  void pretty_print(std::ostream& os) const override;

  int64_t normalized_size;  ///< as given
  double eps;               ///< as given: added to the variance
  bool elementwise_affine;  ///< as given
  ///@{
  /// (normalized_size), undefined without elementwise_affine
  Tensor weight, bias;
  ///@}
};

}  // namespace nn
}  // namespace ringgrad
