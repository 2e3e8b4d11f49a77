// nn/layernorm.h: LayerNorm over the last dimension, with a learnable scale and shift.
#pragma once

#include <ringgrad/nn/module.h>

namespace ringgrad {
namespace nn {

class LayerNorm : public Cloneable<LayerNorm> {
 public:
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true);

  std::string type_name() const override { return "LayerNorm"; }
  Tensor forward(const Tensor& x) override;
  void reset() override;  // weight = 1, bias = 0, as in PyTorch
  void pretty_print(std::ostream& os) const override;

  int64_t normalized_size;
  double eps;
  bool elementwise_affine;
  Tensor weight, bias;  // (normalized_size), undefined without elementwise_affine
};

}  // namespace nn
}  // namespace ringgrad
