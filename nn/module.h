// nn/module.h: Module, the base of every layer and model.
//
// A module registers its parameters (tensors the optimizer updates), buffers (state that is saved
// but not trained, such as running statistics) and submodules by name. From those registries it
// derives everything generic: dotted names ("fc1.weight"), to(device), train()/eval(), zero_grad(),
// state_dict() and load_state_dict().
//
// The members a model declares (`fc1`, `weight`) and the registry hold the *same* tensor or module
// handle, so `model->fc1->weight` is the registered parameter. Operations that move or reload data
// (to, load_state_dict) change the tensors in place (Tensor::set_data, copy_), so those handles --
// and an optimizer holding them -- stay valid.
//
//   struct Mlp : nn::Cloneable<Mlp> {
//     Mlp(int64_t in, int64_t hidden, int64_t out) : in(in), hidden(hidden), out(out) { reset(); }
//     void reset() override {  // creates and registers everything; clone() calls it again
//       fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden));
//       fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, out));
//     }
//     Tensor forward(const Tensor& x) { return fc2->forward(relu(fc1->forward(x))); }
//     int64_t in, hidden, out;
//     std::shared_ptr<nn::Linear> fc1, fc2;
//   };
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

// Name -> tensor, sorted by name (as safetensors stores them). Values are detached views of the
// module's tensors: reading them is free, and writing a checkpoint copies them out.
using StateDict = std::map<std::string, Tensor>;

template <typename T>
using Named = std::vector<std::pair<std::string, T>>;  // registration order, like PyTorch's

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;

  // A short type name for printing and error messages ("Linear", "Sequential").
  virtual std::string type_name() const { return "Module"; }

  // The computation, for modules with one input and one output (all built-in layers; Sequential
  // chains them through this). A model with other inputs declares its own forward.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // --- registration: call from the constructor (or reset()); each returns what it registered ------
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // --- traversal ---------------------------------------------------------------------------------
  Named<Tensor> named_parameters(bool recurse = true) const;  // "fc1.weight", ...
  std::vector<Tensor> parameters(bool recurse = true) const;
  Named<Tensor> named_buffers(bool recurse = true) const;
  Named<std::shared_ptr<Module>> named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  Named<std::shared_ptr<Module>> named_modules();      // this module ("") and every descendant, depth first
  void apply(const std::function<void(Module&)>& fn);  // fn on every descendant, then on this module

  // --- state -------------------------------------------------------------------------------------
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void to(Device device);  // moves parameters, gradients and buffers in place
  void to(DType dtype);    // converts floating parameters and buffers in place
  void zero_grad();        // clears gradients (to undefined, like PyTorch's set_to_none=True)

  // Parameters and buffers under their dotted names.
  StateDict state_dict() const;
  // Copies values into the existing tensors (in place). Keys may carry a leading "module." (as
  // PyTorch's DataParallel/DDP checkpoints do). With `strict`, any missing key, unexpected key or
  // shape mismatch is an error that lists them all by name; without it, only matching keys load
  // (a shape mismatch is still an error).
  void load_state_dict(const StateDict& state, bool strict = true);

  // A deep copy: fresh parameters with the same values (DataParallel's replicate needs it).
  // Modules implement it through nn::Cloneable<Derived> and reset().
  virtual std::shared_ptr<Module> clone() const;
  // Creates and registers this module's parameters, buffers and submodules. A module whose
  // constructor calls reset() can be cloned: the copy runs reset() again, then loads the values.
  virtual void reset() {}

  // Prints the module tree: "Linear(in_features=784, out_features=256, bias=true)".
  virtual void pretty_print(std::ostream& os) const { os << type_name() << "()"; }

 protected:
  // Clone's steps: empty a freshly copied module's registries before reset() refills them, then give
  // the new tensors copies of the original's values (on the original's device and dtype).
  void clear_registries();
  void copy_values_from(const Module& original);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, bool recurse, bool buffers, Named<Tensor>& out) const;

  Named<Tensor> parameters_;
  Named<Tensor> buffers_;
  Named<std::shared_ptr<Module>> children_;
  bool training_ = true;
};

// CRTP helper that gives a module type its clone(): copy the object (plain members such as sizes
// come along), empty its registries, run reset() to create fresh tensors and submodules, then copy
// the original's values into them. This is the PyTorch C++ frontend's design: C++ cannot find a
// type's members by name, so the module re-creates them itself.
template <typename Derived>
class Cloneable : public Module {
 public:
  std::shared_ptr<Module> clone() const override {
    auto copy = std::make_shared<Derived>(static_cast<const Derived&>(*this));
    copy->clear_registries();
    copy->reset();
    copy->copy_values_from(*this);
    copy->train(is_training());
    return copy;
  }
};

std::ostream& operator<<(std::ostream& os, const Module& module);

}  // namespace nn
}  // namespace ringgrad
