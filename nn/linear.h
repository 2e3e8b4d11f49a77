/// @file
/// nn/linear.h: Linear, y = x W^T + b, optionally fused with its activation.
#pragma once

#include <ringgrad/core/base/arg.h>
#include <ringgrad/core/base/op_params.h>
#include <ringgrad/nn/module.h>

namespace ringgrad {
namespace nn {

/// A Linear layer's shape and extras: `LinearOptions(784, 256).bias(false).activation(Activation::Relu)`.
struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  RINGGRAD_ARG(int64_t, in_features);   ///< the size of each input row
  RINGGRAD_ARG(int64_t, out_features);  ///< the size of each output row
  RINGGRAD_ARG(bool, bias) = true;      ///< add a learned bias
  /// Activation applied to the output. Relu runs in the GEMM's epilogue: one kernel for linear+ReLU.
  RINGGRAD_ARG(Activation, activation) = Activation::None;
  RINGGRAD_ARG(DType, dtype) = DType::f32;  ///< the parameters' dtype
};

/// y = x W^T + b (linear), with an optional activation fused in, as torch.nn.Linear.
class Linear : public Cloneable<Linear> {
 public:
  /// With a bias, no activation, float32.
  Linear(int64_t in_features, int64_t out_features) : Linear(LinearOptions(in_features, out_features)) {}
  /// Creates weight and bias (reset()) of the options' sizes and dtype; throws unless both sizes are > 0.
  explicit Linear(const LinearOptions& options);

  std::string type_name() const override { return "Linear"; }
  Tensor forward(const Tensor& x) override;
  /// PyTorch's default init: W ~ U(-1/sqrt(in), 1/sqrt(in)) (Kaiming-uniform, a = sqrt(5)), b the same.
  void reset() override;
  void pretty_print(std::ostream& os) const override;

  LinearOptions options;  ///< as given
  Tensor weight;          ///< (out_features, in_features), row-major, same layout as PyTorch
  Tensor bias;            ///< (out_features), or undefined without bias
};

}  // namespace nn
}  // namespace ringgrad
