/// @file
/// nn/module.h: Module, the base of every layer and model.
///
/// A module registers its parameters (tensors the optimizer updates), buffers (state that is saved
/// but not trained, such as running statistics) and submodules by name. From those registries it
/// derives everything generic: dotted names ("fc1.weight"), to(device), train()/eval(), zero_grad(),
/// state_dict() and load_state_dict().
///
/// The members a model declares (`fc1`, `weight`) and the registry hold the *same* tensor or module
/// handle, so `model->fc1->weight` is the registered parameter. Operations that move or reload data
/// (to, load_state_dict) change the tensors in place (Tensor::set_data, copy_), so those handles --
/// and an optimizer holding them -- stay valid.
///
/// @code
///   struct Mlp : nn::Cloneable<Mlp> {
///     Mlp(int64_t in, int64_t hidden, int64_t out) : in(in), hidden(hidden), out(out) { reset(); }
///     void reset() override {  // creates and registers everything; clone() calls it again
///       fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden));
///       fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, out));
///     }
///     Tensor forward(const Tensor& x) { return fc2->forward(relu(fc1->forward(x))); }
///     int64_t in, hidden, out;
///     std::shared_ptr<nn::Linear> fc1, fc2;
///   };
/// @endcode
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ringgrad/core/tensor.h>

namespace ringgrad {
namespace nn {

/// Name -> tensor, sorted by name (as safetensors stores them). Values are detached views of the
/// module's tensors: reading them is free, and writing a checkpoint copies them out.
using StateDict = std::map<std::string, Tensor>;

/// (name, value) pairs in registration order, like PyTorch's named_parameters().
template <typename T>
using Named = std::vector<std::pair<std::string, T>>;  ///< registration order, like PyTorch's

/// The base of every layer and model: registries of parameters, buffers and submodules by name, and
/// everything derived from them (dotted names, to(), train()/eval(), zero_grad(), state_dict()).
/// Hold modules by std::shared_ptr (register_module, clone and DataParallel do).
class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;

  /// A short type name for printing and error messages ("Linear", "Sequential").
  virtual std::string type_name() const { return "Module"; }

  /// The computation, for modules with one input and one output (all built-in layers; Sequential
  /// chains them through this). A model with other inputs declares its own forward.
  /// @throws ringgrad::Error when the module does not implement it.
  virtual Tensor forward(const Tensor& x);
  /// Same as forward(x).
  Tensor operator()(const Tensor& x) { return forward(x); }

  // --- registration: call from the constructor (or reset()); each returns what it registered ------
  /// Registers `tensor` as parameter `name` and returns it: a leaf (detached when it was not one)
  /// that requires grad when `requires_grad` and its dtype is floating. Keep the returned handle.
  /// @throws ringgrad::Error on an empty name, a name containing '.', an undefined tensor, or a
  /// name already used by a parameter, buffer or submodule of this module.
  Tensor register_parameter(const std::string& name, const Tensor& tensor, bool requires_grad = true);
  /// Registers a detached `tensor` as buffer `name` (saved in state_dict(), moved by to(), never
  /// trained) and returns it; throws like register_parameter.
  Tensor register_buffer(const std::string& name, const Tensor& tensor);
  /// Registers `module` as submodule `name` (its names get the prefix "name.") and returns it.
  /// @throws ringgrad::Error on a null module or a bad or repeated name, as register_parameter.
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // --- traversal ---------------------------------------------------------------------------------
  Named<Tensor> named_parameters(bool recurse = true) const;  ///< "fc1.weight", ...
  /// The parameters of named_parameters(), without their names (what an optimizer takes).
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// Buffers under their dotted names; only this module's own with `recurse` false.
  Named<Tensor> named_buffers(bool recurse = true) const;
  /// The direct submodules, in registration order.
  Named<std::shared_ptr<Module>> named_children() const;
  /// The direct submodules, without their names.
  std::vector<std::shared_ptr<Module>> children() const;
  Named<std::shared_ptr<Module>> named_modules();      ///< this module ("") and every descendant, depth first
  void apply(const std::function<void(Module&)>& fn);  ///< fn on every descendant, then on this module

  // --- state -------------------------------------------------------------------------------------
  /// Sets training mode (on) or evaluation mode (off) on this module and every descendant; Dropout
  /// is the layer whose forward depends on it. Modules start in training mode.
  virtual void train(bool on = true);
  /// Same as train(false).
  void eval() { train(false); }
  /// Whether the module is in training mode.
  bool is_training() const { return training_; }
  void to(Device device);  ///< moves parameters, gradients and buffers in place
  void to(DType dtype);    ///< converts floating parameters and buffers in place
  void zero_grad();        ///< clears gradients (to undefined, like PyTorch's set_to_none=True)

  /// Parameters and buffers under their dotted names.
  StateDict state_dict() const;
  /// Copies values into the existing tensors (in place). Keys may carry a leading "module." (as
  /// PyTorch's DataParallel/DDP checkpoints do). With `strict`, any missing key, unexpected key or
  /// shape mismatch is an error that lists them all by name; without it, only matching keys load
  /// (a shape mismatch is still an error).
  void load_state_dict(const StateDict& state, bool strict = true);

  /// A deep copy: fresh parameters with the same values (DataParallel's replicate needs it).
  /// Modules implement it through nn::Cloneable<Derived> and reset().
  virtual std::shared_ptr<Module> clone() const;
  /// Creates and registers this module's parameters, buffers and submodules. A module whose
  /// constructor calls reset() can be cloned: the copy runs reset() again, then loads the values.
  virtual void reset() {}

  /// Prints the module tree: "Linear(in_features=784, out_features=256, bias=true)".
  virtual void pretty_print(std::ostream& os) const { os << type_name() << "()"; }

 protected:
  /// Clone's steps: empty a freshly copied module's registries before reset() refills them, then give
  /// the new tensors copies of the original's values (on the original's device and dtype).
  void clear_registries();
  /// The second of clone's steps (see clear_registries()); throws when reset() created other names.
  void copy_values_from(const Module& original);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, bool recurse, bool buffers, Named<Tensor>& out) const;

  Named<Tensor> parameters_;
  Named<Tensor> buffers_;
  Named<std::shared_ptr<Module>> children_;
  bool training_ = true;
};

/// CRTP helper that gives a module type its clone(): copy the object (plain members such as sizes
/// come along), empty its registries, run reset() to create fresh tensors and submodules, then copy
/// the original's values into them. This is the PyTorch C++ frontend's design: C++ cannot find a
/// type's members by name, so the module re-creates them itself.
template <typename Derived>
class Cloneable : public Module {
 public:
  /// A deep copy of this Derived, made by the steps above; it keeps the original's training mode.
  std::shared_ptr<Module> clone() const override {
    auto copy = std::make_shared<Derived>(static_cast<const Derived&>(*this));
    copy->clear_registries();
    copy->reset();
    copy->copy_values_from(*this);
    copy->train(is_training());
    return copy;
  }
};

/// Prints `module` with its pretty_print().
std::ostream& operator<<(std::ostream& os, const Module& module);

}  // namespace nn
}  // namespace ringgrad
