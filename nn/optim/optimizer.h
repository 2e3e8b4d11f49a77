/// @file
/// nn/optim/optimizer.h: Optimizer, the base of SGD, Adam and AdamW.
///
/// An optimizer holds handles to the parameters it updates (the model's own tensors: an update
/// writes into their storage, so `model->fc1->weight` sees it) and, per parameter, the state its
/// rule needs (momentum buffers, Adam's moments), created at the parameter's first step on the
/// parameter's device. One parameter group, as in most PyTorch training scripts.
///
/// @code
///   optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
///   for (...) { opt.zero_grad(); loss(model, batch).backward(); opt.step(); }
/// @endcode
///
/// state_dict() names everything as PyTorch's optimizer.state_dict() does, flattened to tensors so a
/// checkpoint can store it next to the weights:
/// @code
///   "state.<i>.<name>"         per-parameter state of parameter i: momentum_buffer (SGD); step (0-d
///                              float64 on the CPU, as PyTorch keeps it), exp_avg, exp_avg_sq (Adam)
///   "param_groups.0.<name>"    hyperparameters as 0-d float64 (lr, momentum, betas as beta1/beta2, ...)
///   "param_groups.0.params"    int64 [0, 1, ..., n-1]: the parameter indices, as in PyTorch
/// @endcode
/// A parameter that has not stepped yet has no `"state.<i>"` keys, exactly as in PyTorch.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/module.h>

namespace ringgrad {
namespace nn {
namespace optim {

/// The base of the optimizers: the parameters it updates in place and, per parameter, the state its
/// rule needs. Subclasses implement step(), state_dict() and load_state_dict().
class Optimizer {
 public:
  /// Every parameter must be a defined floating leaf that requires grad, listed once; the error
  /// names the index of the first that is not.
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual const char* name() const = 0;  ///< "SGD", "Adam", "AdamW": prefixes error messages

  /// Updates every parameter that has a gradient; parameters whose grad is undefined are skipped
  /// (their state is left untouched), as in PyTorch.
  virtual void step() = 0;
  /// Sets every parameter's gradient to undefined (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  double lr() const { return lr_; }                              ///< the current learning rate
  void set_lr(double lr);                                        ///< what schedulers call between steps
  const std::vector<Tensor>& params() const { return params_; }  ///< as given to the constructor

  /// A snapshot of all state (copies: later steps do not change the returned tensors).
  virtual nn::StateDict state_dict() const = 0;
  /// Restores a state_dict() of the same optimizer type over the same parameters. Everything is
  /// checked before anything changes: a missing or unexpected key, a wrong parameter count, a state
  /// tensor whose shape or dtype differs from its parameter's, or invalid hyperparameters throw
  /// ringgrad::Error naming the key, and leave this optimizer as it was.
  virtual void load_state_dict(const nn::StateDict& state) = 0;

 protected:
  /// For step(): the gradient of parameter i as a dense tensor matching the parameter (dtype, device,
  /// shape), or undefined when the parameter has none.
  Tensor dense_grad(size_t i) const;

  /// For state_dict(): "param_groups.0.params" and the hyperparameters, lr included.
  nn::StateDict group_state(const std::vector<std::pair<std::string, double>>& hyperparameters) const;
  static std::string state_key(size_t i, const std::string& name);  ///< `"state.<i>.<name>"`

  /// For load_state_dict(): reads keys, checking each, and remembers which it read so that
  /// finish() can reject the rest as unexpected.
  class StateReader {
   public:
    StateReader(const Optimizer& opt, const nn::StateDict& state);  ///< checks the parameter count
    double hyperparameter(const std::string& name);                 ///< `"param_groups.0.<name>"`, required
    bool has_state(size_t i) const;                                 ///< any `"state.<i>."` key present
    /// A copy of `"state.<i>.<name>"` on parameter i's device, with its shape and dtype (checked).
    Tensor state_like_param(size_t i, const std::string& name);
    double state_scalar(size_t i, const std::string& name);  ///< a one-element `"state.<i>.<name>"`
    void finish() const;                                     ///< throws on any key not read

   private:
    const Tensor& find(const std::string& key);
    const Optimizer& opt_;
    const nn::StateDict& state_;
    std::set<std::string> read_;
  };

  std::vector<Tensor> params_;  ///< see params()
  double lr_ = 0.0;             ///< see lr()
};

}  // namespace optim
}  // namespace nn
}  // namespace ringgrad
