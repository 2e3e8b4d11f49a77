// tests/consumer/main.cpp: the smallest real use of an installed ringgrad -- a gradient.
// y = sum(x * x), so dy/dx = 2x. Prints OK and exits 0 when autograd agrees.
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <iostream>
#include <vector>

int main() {
  using namespace ringgrad;
  try {
    const std::vector<float> values = {1.5f, -2.0f, 0.25f, 3.0f, -0.5f, 4.0f};
    Tensor x = from_vector(values, Shape{2, 3}).requires_grad_(true);
    Tensor y = sum(x * x);
    y.backward();
    const std::vector<float> grad = x.grad().to_vector<float>();
    if (grad.size() != values.size()) {
      std::cerr << "consumer: expected " << values.size() << " gradient values, got " << grad.size() << '\n';
      return 1;
    }
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::fabs(grad[i] - 2.0f * values[i]) > 1e-6f) {
        std::cerr << "consumer: expected grad[" << i << "] == " << 2.0f * values[i] << ", got " << grad[i] << '\n';
        return 1;
      }
    }
    std::cout << "ringgrad " << RINGGRAD_VERSION_STRING << ": d/dx sum(x*x) == 2x  OK\n";
    return 0;
  } catch (const Error& e) {
    std::cerr << "consumer: ringgrad::Error: " << e.what() << '\n';
    return 1;
  }
}
