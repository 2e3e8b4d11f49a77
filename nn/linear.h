// nn/linear.h: Linear, y = x W^T + b, optionally fused with its activation.
#pragma once

#include <ringgrad/core/base/op_params.h>
#include <ringgrad/nn/module.h>

namespace ringgrad {
namespace nn {

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  LinearOptions& bias(bool b) {
    bias_ = b;
    return *this;
  }
  // Activation applied to the output. Relu runs in the GEMM's epilogue: one kernel for linear+ReLU.
  LinearOptions& activation(Activation a) {
    activation_ = a;
    return *this;
  }
  LinearOptions& dtype(DType dt) {
    dtype_ = dt;
    return *this;
  }

  int64_t in_features_, out_features_;
  bool bias_ = true;
  Activation activation_ = Activation::None;
  DType dtype_ = DType::f32;
};

class Linear : public Cloneable<Linear> {
 public:
  Linear(int64_t in_features, int64_t out_features) : Linear(LinearOptions(in_features, out_features)) {}
  explicit Linear(const LinearOptions& options);

  std::string type_name() const override { return "Linear"; }
  Tensor forward(const Tensor& x) override;
  // PyTorch's default init: W ~ U(-1/sqrt(in), 1/sqrt(in)) (Kaiming-uniform, a = sqrt(5)), b the same.
  void reset() override;
  void pretty_print(std::ostream& os) const override;

  LinearOptions options;
  Tensor weight;  // (out_features, in_features), row-major, same layout as PyTorch
  Tensor bias;    // (out_features), or undefined without bias
};

}  // namespace nn
}  // namespace ringgrad
