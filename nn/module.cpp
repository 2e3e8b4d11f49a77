// nn/module.cpp: registries, traversal, to/train/zero_grad and state dicts.
#include <ringgrad/nn/module.h>

#include <algorithm>
#include <ostream>
#include <set>
#include <sstream>

#include <ringgrad/core/autograd/grad_mode.h>

namespace ringgrad {
namespace nn {
namespace {

void check_name(const std::string& name, const char* what) {
  RINGGRAD_CHECK(!name.empty() && name.find('.') == std::string::npos, "register_", what,
                 ": expected a non-empty name without '.', got '", name, "'");
}

template <typename T>
bool has_name(const Named<T>& list, const std::string& name) {
  return std::any_of(list.begin(), list.end(), [&](const auto& entry) { return entry.first == name; });
}

// PyTorch's DataParallel and DDP save their wrapped model's keys as "module.<name>".
std::string strip_module_prefix(const std::string& key) {
  static const std::string kPrefix = "module.";
  return key.compare(0, kPrefix.size(), kPrefix) == 0 ? key.substr(kPrefix.size()) : key;
}

}  // namespace

Tensor Module::register_parameter(const std::string& name, const Tensor& tensor, bool requires_grad) {
  check_name(name, "parameter");
  RINGGRAD_CHECK(tensor.defined(), "register_parameter: expected a defined tensor for '", name, "'");
  RINGGRAD_CHECK(!has_name(parameters_, name) && !has_name(buffers_, name) && !has_name(children_, name),
                 "register_parameter: '", name, "' is already registered in this ", type_name());
  // A parameter is a leaf the module owns: cut it from whatever graph produced its initial value.
  Tensor leaf = tensor.is_leaf() ? tensor : tensor.detach();
  if (is_floating(leaf.dtype())) leaf.requires_grad_(requires_grad);
  parameters_.emplace_back(name, leaf);
  return leaf;
}

Tensor Module::register_buffer(const std::string& name, const Tensor& tensor) {
  check_name(name, "buffer");
  RINGGRAD_CHECK(tensor.defined(), "register_buffer: expected a defined tensor for '", name, "'");
  RINGGRAD_CHECK(!has_name(parameters_, name) && !has_name(buffers_, name) && !has_name(children_, name),
                 "register_buffer: '", name, "' is already registered in this ", type_name());
  buffers_.emplace_back(name, tensor.detach());
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_name(name, "module");
  RINGGRAD_CHECK(module != nullptr, "register_module: expected a module for '", name, "', got nullptr");
  RINGGRAD_CHECK(!has_name(parameters_, name) && !has_name(buffers_, name) && !has_name(children_, name),
                 "register_module: '", name, "' is already registered in this ", type_name());
  children_.emplace_back(name, std::move(module));
}

void Module::clear_registries() {
  parameters_.clear();
  buffers_.clear();
  children_.clear();
}

void Module::collect(const std::string& prefix, bool recurse, bool buffers, Named<Tensor>& out) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", true, buffers, out);
}

Named<Tensor> Module::named_parameters(bool recurse) const {
  Named<Tensor> out;
  collect("", recurse, /*buffers=*/false, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& entry : named_parameters(recurse)) out.push_back(entry.second);
  return out;
}

Named<Tensor> Module::named_buffers(bool recurse) const {
  Named<Tensor> out;
  collect("", recurse, /*buffers=*/true, out);
  return out;
}

Named<std::shared_ptr<Module>> Module::named_children() const { return children_; }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& entry : children_) out.push_back(entry.second);
  return out;
}

Named<std::shared_ptr<Module>> Module::named_modules() {
  Named<std::shared_ptr<Module>> out;
  // shared_from_this needs the module to be owned by a shared_ptr, which is how modules are held.
  out.emplace_back("", shared_from_this());
  for (const auto& [name, child] : children_)
    for (auto& [sub, module] : child->named_modules())
      out.emplace_back(sub.empty() ? name : std::string(name).append(".").append(sub), module);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& entry : children_) entry.second->apply(fn);
  fn(*this);
}

void Module::train(bool on) {
  training_ = on;
  for (const auto& entry : children_) entry.second->train(on);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (Tensor& t : parameters()) {
    if (t.device() == device) continue;
    const Tensor grad = t.grad();
    t.set_data(t.detach().to(device));
    if (grad.defined()) t.set_grad(grad.to(device));
  }
  for (auto& [name, t] : named_buffers())
    if (t.device() != device) t.set_data(t.to(device));
}

void Module::to(DType dtype) {
  RINGGRAD_CHECK(is_floating(dtype), "Module::to: expected a floating dtype, got ", dtype);
  NoGradGuard no_grad;
  for (Tensor& t : parameters()) {
    if (!is_floating(t.dtype()) || t.dtype() == dtype) continue;
    const Tensor grad = t.grad();
    t.set_data(t.detach().to(dtype));
    if (grad.defined()) t.set_grad(grad.to(dtype));
  }
  for (auto& [name, t] : named_buffers())
    if (is_floating(t.dtype()) && t.dtype() != dtype) t.set_data(t.to(dtype));
}

void Module::zero_grad() {
  for (const Tensor& t : parameters()) t.set_grad(Tensor());
}

StateDict Module::state_dict() const {
  StateDict state;
  for (auto& [name, t] : named_parameters()) state.emplace(name, t.detach());
  for (auto& [name, t] : named_buffers()) state.emplace(name, t.detach());
  return state;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict own = state_dict();
  // Match first, copy after: a load that fails changes nothing.
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source)
  std::set<std::string> used;
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [key, value] : state) {
    const std::string name = strip_module_prefix(key);
    auto it = own.find(name);
    if (it == own.end()) {
      unexpected.push_back(key);
      continue;
    }
    RINGGRAD_CHECK(used.insert(name).second, "load_state_dict: '", detail::printable(name),
                   "' appears twice (with and without the "
                   "'module.' prefix)");
    if (value.shape() != it->second.shape()) {
      mismatched.push_back(detail::str(name, " (expected ", it->second.shape(), ", got ", value.shape(), ")"));
      continue;
    }
    copies.emplace_back(it->second, value);
  }
  for (const auto& entry : own)
    if (!used.count(entry.first)) missing.push_back(entry.first);

  // The first few names (escaped: they may come from a file), then how many more: a file of a
  // million tensors must not make a message of megabytes.
  auto join = [](const std::vector<std::string>& names) {
    constexpr size_t kShown = 10;
    std::string out;
    for (size_t i = 0; i < names.size() && i < kShown; ++i) out += (i ? ", " : "") + detail::printable(names[i]);
    if (names.size() > kShown) out += detail::str(" and ", names.size() - kShown, " more");
    return out;
  };
  std::string problems;
  if (!mismatched.empty()) problems += "\n  shape mismatches: " + join(mismatched);
  if (strict && !missing.empty()) problems += "\n  missing keys: " + join(missing);
  if (strict && !unexpected.empty()) problems += "\n  unexpected keys: " + join(unexpected);
  RINGGRAD_CHECK(problems.empty(), "load_state_dict: the state does not fit this ", type_name(), problems);

  NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src);
}

Tensor Module::forward(const Tensor&) {
  throw Error(detail::str("forward: ", type_name(), " does not implement forward(const Tensor&)"));
}

std::shared_ptr<Module> Module::clone() const {
  throw Error(detail::str("clone: ", type_name(), " cannot be cloned; derive it from nn::Cloneable<", type_name(),
                          "> and create its parameters and submodules in reset()"));
}

void Module::copy_values_from(const Module& original) {
  NoGradGuard no_grad;
  const StateDict source = original.state_dict();
  const Named<Tensor> originals = original.named_parameters();
  for (auto& [name, t] : named_parameters()) {
    auto it = source.find(name);
    RINGGRAD_CHECK(it != source.end(), "clone: reset() of ", type_name(), " created parameter '", name,
                   "' that the original does not have");
    t.set_data(it->second.clone());  // fresh storage, the original's device and dtype
  }
  for (auto& [name, t] : named_buffers()) {
    auto it = source.find(name);
    RINGGRAD_CHECK(it != source.end(), "clone: reset() of ", type_name(), " created buffer '", name,
                   "' that the original does not have");
    t.set_data(it->second.clone());
  }
  // Frozen parameters stay frozen in the copy.
  Named<Tensor> mine = named_parameters();
  RINGGRAD_CHECK(mine.size() == originals.size(), "clone: reset() of ", type_name(), " created ", mine.size(),
                 " parameters, the original has ", originals.size(),
                 "; create every parameter and submodule in "
                 "reset() and call reset() from the constructor");
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i].second.requires_grad() != originals[i].second.requires_grad())
      mine[i].second.requires_grad_(originals[i].second.requires_grad());
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  module.pretty_print(os);
  return os;
}

}  // namespace nn
}  // namespace ringgrad
