// examples/train_synthetic.cpp: autograd end to end -- a two-layer network learns a nonlinear function.
//
// The data: 256 random inputs x (B = 256 rows, 8 features) and targets from a fixed random "teacher"
// network, y = tanh(x T1^T) T2^T. The student, x -> linear 8->32 -> tanh -> linear 32->1, starts from
// other random weights and learns to imitate the teacher by full-batch gradient descent on the mean
// squared error. It uses no nn modules or optimizers, only autograd: the parameters are plain
// tensors with requires_grad, and the SGD step writes through their data under NoGradGuard.
//
//   ./build/examples/train_synthetic [--steps N] [--lr X] [--print-every N]   (--help lists them)
//
// Exits 1 unless the final loss is at least 10x below the first one, so `ctest` runs it as a check.
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "tools/cli/flags.h"

using namespace ringgrad;

namespace {

constexpr int64_t kBatch = 256;
constexpr int64_t kIn = 8, kHidden = 32, kOut = 1;
constexpr int64_t kTeacherHidden = 16;

// Weights of a layer with `fan_in` inputs, scaled by 1/sqrt(fan_in) so that activations keep unit
// scale through the layer (tanh then neither saturates nor stays linear).
Tensor init_weight(int64_t out, int64_t fan_in, uint64_t seed) {
  return randn({out, fan_in}, DType::f32, seed) * (1.0 / std::sqrt(static_cast<double>(fan_in)));
}

// p -= lr * p.grad, then clear the gradient for the next step (backward adds into .grad).
void sgd_step(const std::vector<Tensor>& params, float lr) {
  NoGradGuard no_grad;  // the update itself must not be recorded for backward
  for (const Tensor& p : params) {
    RINGGRAD_CHECK(p.grad().defined(), "sgd_step: expected every parameter to have a gradient");
    const Tensor grad = p.grad().contiguous();
    float* w = p.data<float>();
    const float* dw = grad.data<float>();
    for (int64_t i = 0; i < p.numel(); ++i) w[i] -= lr * dw[i];
    p.set_grad(Tensor());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 1000, print_every = 100;
  double learning_rate = 0.2;
  cli::FlagParser flags("train_synthetic",
                        "A two-layer network learns a fixed random teacher network by gradient descent; exits 1 "
                        "unless the loss falls at least 10x.");
  flags.add_int("--steps", &steps, "full-batch gradient steps", 1, 1000000);
  flags.add_double("--lr", &learning_rate, "SGD learning rate", 0.0, 100.0);
  flags.add_int("--print-every", &print_every, "print the loss every this many steps", 1, 1000000);
  flags.parse(argc, argv);
  const float lr = static_cast<float>(learning_rate);
  try {
    // --- data: inputs and the teacher's outputs, fixed for the whole run ---------------------------
    const Tensor x = randn({kBatch, kIn}, DType::f32, /*seed=*/1);
    const Tensor teacher1 = init_weight(kTeacherHidden, kIn, /*seed=*/2) * 2.0;  // x2: clearly nonlinear
    const Tensor teacher2 = init_weight(kOut, kTeacherHidden, /*seed=*/3);
    const Tensor y = linear(tanh(linear(x, teacher1)), teacher2);

    // --- the student: leaves that require grad ------------------------------------------------------
    Tensor w1 = init_weight(kHidden, kIn, /*seed=*/11).requires_grad_(true);  // (32, 8)
    Tensor b1 = zeros({kHidden}).requires_grad_(true);
    Tensor w2 = init_weight(kOut, kHidden, /*seed=*/12).requires_grad_(true);  // (1, 32)
    Tensor b2 = zeros({kOut}).requires_grad_(true);
    const std::vector<Tensor> params = {w1, b1, w2, b2};

    std::printf("# ringgrad %s train_synthetic: %lld -> %lld (tanh) -> %lld, %lld samples, SGD lr=%g\n",
                RINGGRAD_VERSION_STRING, (long long)kIn, (long long)kHidden, (long long)kOut, (long long)kBatch, lr);
    std::printf("#  step        loss\n");

    double first_loss = 0.0, loss_value = 0.0;
    for (int step = 0; step <= steps; ++step) {
      const Tensor prediction = linear(tanh(linear(x, w1, b1)), w2, b2);
      const Tensor loss = mse_loss(prediction, y);
      loss_value = loss.item();
      if (step == 0) first_loss = loss_value;
      if (step % print_every == 0 || step == steps) std::printf("%7d  %10.6f\n", step, loss_value);
      if (step == steps) break;  // the last row only measures
      loss.backward();
      sgd_step(params, lr);
    }

    const double ratio = first_loss / loss_value;
    std::printf("# loss fell from %.6f to %.6f: %.1fx lower (needs >= 10x)\n", first_loss, loss_value, ratio);
    if (!(ratio >= 10.0)) {
      std::fprintf(stderr, "train_synthetic: expected the loss to fall at least 10x, got %.2fx\n", ratio);
      return 1;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "train_synthetic: ringgrad::Error: %s\n", e.what());
    return 1;
  }
}
