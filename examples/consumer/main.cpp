// examples/consumer/main.cpp: the program both consumer projects build -- the smallest real training
// run a project embedding ringgrad would write. One Linear(1, 1) layer learns the line y = 3x - 2
// from 64 points by full-batch SGD on the mean squared error.
//
// The points lie exactly on the line, so gradient descent must find w = 3, b = -2 to within
// rounding. Prints the fit and exits 1 unless both are within 1e-3: examples/consumer/run.cmake
// runs it as the last step of the `install` tests, and a wrong result fails them.
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <cstdio>
#include <memory>

using namespace ringgrad;

namespace {

constexpr double kSlope = 3.0, kIntercept = -2.0;
constexpr int kSteps = 200;
constexpr double kLearningRate = 0.5;
constexpr double kTolerance = 1e-3;

}  // namespace

int main() {
  try {
    manual_seed(0);  // the layer's initial weights
    const Tensor x = arange(-1.0, 1.0, 1.0 / 32).reshape({64, 1});  // 64 points in [-1, 1)
    const Tensor y = x * kSlope + kIntercept;

    auto model = std::make_shared<nn::Linear>(1, 1);
    optim::SGD optimizer(model->parameters(), optim::SGDOptions(kLearningRate));
    const nn::MSELoss loss_fn;

    double loss_value = 0.0;
    for (int step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      const Tensor loss = loss_fn(model->forward(x), y);
      loss_value = loss.item();
      loss.backward();
      optimizer.step();
    }

    const double w = model->weight.item(), b = model->bias.item();
    std::printf("ringgrad %s: fitted y = %.4f x %+.4f (expected y = %.1f x %+.1f), loss %.2e\n",
                RINGGRAD_VERSION_STRING, w, b, kSlope, kIntercept, loss_value);
    if (!(std::fabs(w - kSlope) < kTolerance && std::fabs(b - kIntercept) < kTolerance)) {
      std::fprintf(stderr, "consumer: expected w = %g and b = %g to within %g, got w = %g and b = %g\n",
                   kSlope, kIntercept, kTolerance, w, b);
      return 1;
    }
    std::printf("OK\n");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "consumer: ringgrad::Error: %s\n", e.what());
    return 1;
  }
}
