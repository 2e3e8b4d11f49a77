// nn/layernorm.cpp: LayerNorm's parameters and forward.
#include <ringgrad/nn/layernorm.h>

#include <ostream>

#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace nn {

LayerNorm::LayerNorm(int64_t size, double eps_, bool affine)
    : normalized_size(size), eps(eps_), elementwise_affine(affine) {
  RINGGRAD_CHECK(size > 0, "LayerNorm: expected a positive normalized size, got ", size);
  reset();
}

void LayerNorm::reset() {
  if (elementwise_affine) {
    weight = register_parameter("weight", ones({normalized_size}));
    bias = register_parameter("bias", zeros({normalized_size}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  RINGGRAD_CHECK(x.dim() >= 1 && x.size(-1) == normalized_size, "LayerNorm: expected input with last dim ",
                 normalized_size, ", got ", x.shape());
  return layer_norm(x, weight, bias, eps);
}

void LayerNorm::pretty_print(std::ostream& os) const {
  os << "LayerNorm(" << normalized_size << ", eps=" << eps
     << ", elementwise_affine=" << (elementwise_affine ? "true" : "false") << ')';
}

}  // namespace nn
}  // namespace ringgrad
