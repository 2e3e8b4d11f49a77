/// @file
/// nn/activation.h: ReLU, GELU, Tanh, Sigmoid, SiLU, Flatten and Dropout -- thin modules over core ops,
/// so they can sit in a Sequential.
#pragma once

#include <ostream>

#include <ringgrad/core/ops.h>
#include <ringgrad/nn/module.h>

namespace ringgrad {
namespace nn {

/// max(x, 0), as nn.ReLU.
class ReLU : public Cloneable<ReLU> {
 public:
  std::string type_name() const override { return "ReLU"; }
  Tensor forward(const Tensor& x) override { return relu(x); }
};

/// gelu(x), exact or with the tanh approximation, as nn.GELU.
class GELU : public Cloneable<GELU> {
 public:
  /// GeluApproximate::None: exact (erf); GeluApproximate::Tanh: PyTorch's approximate="tanh".
  explicit GELU(GeluApproximate how = GeluApproximate::None) : approximate(how) {}
  std::string type_name() const override { return "GELU"; }
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  GeluApproximate approximate;  ///< as given to the constructor
};

/// tanh(x), as nn.Tanh.
class Tanh : public Cloneable<Tanh> {
 public:
  std::string type_name() const override { return "Tanh"; }
  Tensor forward(const Tensor& x) override { return tanh(x); }
};

/// 1 / (1 + e^-x), as nn.Sigmoid.
class Sigmoid : public Cloneable<Sigmoid> {
 public:
  std::string type_name() const override { return "Sigmoid"; }
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};

/// x * sigmoid(x), as nn.SiLU.
class SiLU : public Cloneable<SiLU> {
 public:
  std::string type_name() const override { return "SiLU"; }
  Tensor forward(const Tensor& x) override { return silu(x); }
};

/// Flattens dims start_dim..end_dim (default: everything but the batch dim), as nn.Flatten.
class Flatten : public Cloneable<Flatten> {
 public:
  /// Negative dims count from the end.
  explicit Flatten(int64_t first = 1, int64_t last = -1) : start_dim(first), end_dim(last) {}
  std::string type_name() const override { return "Flatten"; }
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  ///@{
  /// as given to the constructor
  int64_t start_dim, end_dim;
  ///@}
};

/// Zeroes each element with probability p while training (scaling the rest by 1/(1-p)); identity in
/// eval mode. Masks come from the default generator, so manual_seed() makes runs repeatable.
class Dropout : public Cloneable<Dropout> {
 public:
  /// `probability` is p, the chance of zeroing an element. @throws ringgrad::Error unless it is in [0, 1].
  explicit Dropout(double probability = 0.5) : p(probability) {
    RINGGRAD_CHECK(p >= 0.0 && p <= 1.0, "Dropout: expected p in [0, 1], got ", p);
  }
  std::string type_name() const override { return "Dropout"; }
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  void pretty_print(std::ostream& os) const override { os << "Dropout(p=" << p << ')'; }
  double p;  ///< the probability of zeroing an element
};

}  // namespace nn
}  // namespace ringgrad
