// nn/activation.h: ReLU, GELU, Tanh, Sigmoid, SiLU, Flatten and Dropout -- thin modules over core ops,
// so they can sit in a Sequential.
#pragma once

#include <ostream>

#include <ringgrad/core/ops.h>
#include <ringgrad/nn/module.h>

namespace ringgrad {
namespace nn {

class ReLU : public Cloneable<ReLU> {
 public:
  std::string type_name() const override { return "ReLU"; }
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public Cloneable<GELU> {
 public:
  explicit GELU(GeluApproximate approximate = GeluApproximate::None) : approximate(approximate) {}
  std::string type_name() const override { return "GELU"; }
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  GeluApproximate approximate;
};

class Tanh : public Cloneable<Tanh> {
 public:
  std::string type_name() const override { return "Tanh"; }
  Tensor forward(const Tensor& x) override { return tanh(x); }
};

class Sigmoid : public Cloneable<Sigmoid> {
 public:
  std::string type_name() const override { return "Sigmoid"; }
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};

class SiLU : public Cloneable<SiLU> {
 public:
  std::string type_name() const override { return "SiLU"; }
  Tensor forward(const Tensor& x) override { return silu(x); }
};

// Flattens dims start_dim..end_dim (default: everything but the batch dim), as nn.Flatten.
class Flatten : public Cloneable<Flatten> {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  std::string type_name() const override { return "Flatten"; }
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  int64_t start_dim, end_dim;
};

// Zeroes each element with probability p while training (scaling the rest by 1/(1-p)); identity in
// eval mode. Masks come from the default generator, so manual_seed() makes runs repeatable.
class Dropout : public Cloneable<Dropout> {
 public:
  explicit Dropout(double p = 0.5) : p(p) {
    RINGGRAD_CHECK(p >= 0.0 && p <= 1.0, "Dropout: expected p in [0, 1], got ", p);
  }
  std::string type_name() const override { return "Dropout"; }
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  void pretty_print(std::ostream& os) const override { os << "Dropout(p=" << p << ')'; }
  double p;
};

}  // namespace nn
}  // namespace ringgrad
