// docs/snippets/mlp.h: the two-layer model the docs' snippets train (the README's Mlp).
#pragma once

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <ringgrad/ringgrad.h>

namespace snippets {
using namespace ringgrad;

// [mlp]
struct Mlp : nn::Cloneable<Mlp> {
  Mlp(int64_t in, int64_t hidden, int64_t out) : in(in), hidden(hidden), out(out) { reset(); }
  void reset() override {  // creates and registers the layers; clone() runs it again
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, out));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
  int64_t in, hidden, out;
  std::shared_ptr<nn::Linear> fc1, fc2;
};
// [/mlp]

// Labels 0..classes-1 for `rows` samples, as an int64 tensor.
inline Tensor labels_for(int64_t rows, int64_t classes, Device device = Device::cpu()) {
  std::vector<int64_t> y(rows);
  for (int64_t i = 0; i < rows; ++i) y[i] = (i * 7) % classes;
  return from_vector<int64_t>(y, Shape{rows}, device);
}

// Exits non-zero with a message when a snippet's result is not what the docs say.
inline void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "snippet check failed: " << what << '\n';
    std::exit(1);
  }
}
}  // namespace snippets
