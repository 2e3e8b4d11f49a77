// examples/consumer/main.cpp: the program both consumer projects build -- the smallest real training
// run a project embedding ringgrad would write. One Linear(1, 1) layer learns the line y = 3x - 2
// from 64 points by full-batch SGD on the mean squared error.
//
// The points lie exactly on the line, so gradient descent must find w = 3, b = -2 to within
// rounding. Then the same fit runs twice more, with nn::optim::SGD(momentum 0.9) and with HeavyBall, an
// optimizer written here against the installed headers (heavy_ball.h): the two must agree bit for
// bit. Last, it checks that a program linking ringgrad::ringgrad alone has no CUDA backend and no
// "nccl" or "gloo" (the parts are components: examples/consumer/README.md). Prints the fit and exits 1
// on any failure: examples/consumer/run.cmake runs it as the last step of the `install` tests, and
// a wrong result fails them.
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "heavy_ball.h"

using namespace ringgrad;

namespace {

constexpr double kSlope = 3.0, kIntercept = -2.0;
constexpr int kSteps = 200;
constexpr double kLearningRate = 0.5;
constexpr double kTolerance = 1e-3;
constexpr double kMomentum = 0.9, kMomentumLearningRate = 0.05;

// Full-batch training of a fresh Linear(1, 1) (seed 0) with `optimizer_for`'s optimizer; returns
// the model.
template <typename MakeOptimizer>
std::shared_ptr<nn::Linear> fit(const Tensor& x, const Tensor& y, int steps, MakeOptimizer optimizer_for) {
  manual_seed(0);  // the layer's initial weights
  auto model = std::make_shared<nn::Linear>(1, 1);
  auto optimizer = optimizer_for(model->parameters());
  const nn::MSELoss loss_fn;
  for (int step = 0; step < steps; ++step) {
    optimizer->zero_grad();
    loss_fn(model->forward(x), y).backward();
    optimizer->step();
  }
  return model;
}

}  // namespace

int main() {
  try {
    manual_seed(0);                                                 // the layer's initial weights
    const Tensor x = arange(-1.0, 1.0, 1.0 / 32).reshape({64, 1});  // 64 points in [-1, 1)
    const Tensor y = x * kSlope + kIntercept;

    auto model = std::make_shared<nn::Linear>(1, 1);
    nn::optim::SGD optimizer(model->parameters(), nn::optim::SGDOptions(kLearningRate));
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
      std::fprintf(stderr, "consumer: expected w = %g and b = %g to within %g, got w = %g and b = %g\n", kSlope,
                   kIntercept, kTolerance, w, b);
      return 1;
    }

    // The out-of-tree optimizer against the built-in one with the same rule.
    const auto sgd = fit(x, y, kSteps, [](std::vector<Tensor> params) {
      return std::make_unique<nn::optim::SGD>(std::move(params),
                                              nn::optim::SGDOptions(kMomentumLearningRate).momentum(kMomentum));
    });
    const auto heavy = fit(x, y, kSteps, [](std::vector<Tensor> params) {
      return std::make_unique<HeavyBall>(std::move(params), kMomentumLearningRate, kMomentum);
    });
    const double ws = sgd->weight.item(), bs = sgd->bias.item(), wh = heavy->weight.item(), bh = heavy->bias.item();
    std::printf(
        "HeavyBall (written outside ringgrad): y = %.4f x %+.4f; nn::optim::SGD momentum %.1f: y = %.4f x %+.4f\n", wh,
        bh, kMomentum, ws, bs);
    if (!(wh == ws && bh == bs && std::fabs(wh - kSlope) < kTolerance && std::fabs(bh - kIntercept) < kTolerance)) {
      std::fprintf(stderr, "consumer: expected HeavyBall to equal nn::optim::SGD bit for bit and fit the line\n");
      return 1;
    }

    // This program links ringgrad::ringgrad alone: no CUDA backend, no "nccl", no "gloo", whatever the
    // installed ringgrad was built with. Asking for them must say how to get them, not crash.
    if (built_with_cuda() || cuda_device_count() != 0 || parallel::nccl_available() || parallel::gloo_available()) {
      std::fprintf(stderr, "consumer: linked ringgrad::ringgrad only, yet a CUDA backend, nccl or gloo is here\n");
      return 1;
    }
    try {
      (void)zeros({2}, Device::cuda(0));
      std::fprintf(stderr, "consumer: expected a CUDA tensor to be refused without ringgrad::cuda\n");
      return 1;
    } catch (const Error& e) {
      if (std::string(e.what()).find("ringgrad::cuda") == std::string::npos) {
        std::fprintf(stderr, "consumer: expected the error to name ringgrad::cuda, got: %s\n", e.what());
        return 1;
      }
      std::printf("without ringgrad::cuda, a CUDA tensor is refused: %s\n", e.what());
    }
    std::printf("OK\n");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "consumer: ringgrad::Error: %s\n", e.what());
    return 1;
  }
}
