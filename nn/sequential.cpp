// nn/sequential.cpp: Sequential and MLP.
#include <ringgrad/nn/sequential.h>

#include <ostream>
#include <string>

#include <ringgrad/core/ops.h>
#include <ringgrad/nn/linear.h>

namespace ringgrad {
namespace nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  modules_.push_back(register_module(std::to_string(modules_.size()), std::move(module)));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& m : modules_) y = m->forward(y);
  return y;
}

std::shared_ptr<Module> Sequential::clone() const {
  auto copy = std::make_shared<Sequential>();
  for (const auto& m : modules_) copy->push_back(m->clone());
  copy->train(is_training());
  return copy;
}

void Sequential::pretty_print(std::ostream& os) const {
  os << "Sequential(";
  for (size_t i = 0; i < modules_.size(); ++i) {
    os << "\n  (" << i << "): ";
    modules_[i]->pretty_print(os);
  }
  os << (modules_.empty() ? ")" : "\n)");
}

MLP::MLP(std::vector<int64_t> sizes_, Act activation_) : sizes(std::move(sizes_)), activation(activation_) {
  RINGGRAD_CHECK(sizes.size() >= 2, "MLP: expected at least two sizes (input and output), got ", sizes.size());
  reset();
}

void MLP::reset() {
  layers.clear();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    LinearOptions options(sizes[i], sizes[i + 1]);
    const bool hidden = i + 2 < sizes.size();
    if (hidden && activation == Act::Relu) options.activation(Activation::Relu);
    if (hidden && activation == Act::GeluTanh) options.activation(Activation::GeluTanh);
    layers.push_back(register_module("fc" + std::to_string(i + 1), std::make_shared<Linear>(options)));
  }
}

Tensor MLP::forward(const Tensor& x) {
  Tensor y = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    y = layers[i]->forward(y);
    if (activation == Act::Tanh && i + 1 < layers.size()) y = tanh(y);
  }
  return y;
}

void MLP::pretty_print(std::ostream& os) const {
  static const char* kNames[] = {"relu", "gelu_tanh", "tanh"};
  os << "MLP(";
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? "-" : "") << sizes[i];
  os << ", activation=" << kNames[static_cast<int>(activation)] << ')';
}

}  // namespace nn
}  // namespace ringgrad
