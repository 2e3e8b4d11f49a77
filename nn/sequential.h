/// @file
/// nn/sequential.h: Sequential, modules applied one after another; and MLP, the common stack of
/// Linear layers with an activation between them.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include <ringgrad/core/base/op_params.h>
#include <ringgrad/nn/module.h>

namespace ringgrad {
namespace nn {

/// Children are registered as "0", "1", ... as in PyTorch, so state_dict keys match torch's
/// ("0.weight").
class Sequential : public Module {
 public:
  Sequential() = default;
  /// The modules, in the order forward() runs them.
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);

  std::string type_name() const override { return "Sequential"; }
  /// Appends (and registers) a module as the next child, "0", "1", ...
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> clone() const override;  ///< clones each child
  void pretty_print(std::ostream& os) const override;

  size_t size() const { return modules_.size(); }  ///< the number of children
  /// Child i; throws std::out_of_range past size().
  const std::shared_ptr<Module>& operator[](size_t i) const { return modules_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

/// sizes = {784, 256, 10}: Linear(784, 256) + activation, Linear(256, 10). Layers are fc1, fc2, ...
/// ReLU is fused into its Linear's GEMM; GELU (tanh) and Tanh follow as their own ops.
class MLP : public Cloneable<MLP> {
 public:
  /// The activation between the Linear layers.
  enum class Act { Relu, GeluTanh, Tanh };
  /// sizes: at least two (input and output); throws ringgrad::Error otherwise.
  MLP(std::vector<int64_t> sizes, Act activation = Act::Relu);

  std::string type_name() const override { return "MLP"; }
  Tensor forward(const Tensor& x) override;
  void reset() override;
  void pretty_print(std::ostream& os) const override;

  std::vector<int64_t> sizes;                         ///< as given
  Act activation;                                     ///< as given
  std::vector<std::shared_ptr<class Linear>> layers;  ///< fc1, fc2, ...: sizes.size() - 1 of them
};

}  // namespace nn
}  // namespace ringgrad
