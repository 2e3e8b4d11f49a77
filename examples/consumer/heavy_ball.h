// examples/consumer/heavy_ball.h: an optimizer written outside ringgrad, against its installed headers
// only -- the way a research prototype adds its own update rule.
//
// HeavyBall is Polyak's momentum, v = mu v + g, p -= lr v: PyTorch's SGD with momentum mu, no
// dampening, no weight decay. It derives from nn::optim::Optimizer (parameter checks, zero_grad,
// state_dict layout) and runs its update with core's fused, in-place sgd_step_ -- the same call
// nn::optim::SGD makes -- so on the same data it must match nn::optim::SGD(lr, momentum mu) exactly.
#pragma once

#include <ringgrad/ringgrad.h>

#include <utility>
#include <vector>

// [heavy_ball]
class HeavyBall final : public ringgrad::nn::optim::Optimizer {
 public:
  HeavyBall(std::vector<ringgrad::Tensor> params, double lr, double momentum)
      : Optimizer(std::move(params)), momentum_(momentum), velocity_(this->params().size()) {
    set_lr(lr);
  }

  const char* name() const override { return "HeavyBall"; }

  void step() override {
    ringgrad::SgdStepArgs args;
    args.lr = lr();
    args.momentum = momentum_;
    for (size_t i = 0; i < params().size(); ++i) {
      const ringgrad::Tensor g = dense_grad(i);  // checked against the parameter, or undefined
      if (!g.defined()) continue;
      args.first_step = !velocity_[i].defined();  // the first step's velocity is the gradient itself
      if (args.first_step) velocity_[i] = ringgrad::empty_like(params()[i]);
      ringgrad::sgd_step_(params()[i], g, velocity_[i], args, "HeavyBall.step");
    }
  }
  // [/heavy_ball]

  ringgrad::nn::StateDict state_dict() const override {
    ringgrad::nn::StateDict out = group_state({{"lr", lr()}, {"momentum", momentum_}});
    for (size_t i = 0; i < velocity_.size(); ++i)
      if (velocity_[i].defined()) out[state_key(i, "momentum_buffer")] = velocity_[i].clone();
    return out;
  }

  void load_state_dict(const ringgrad::nn::StateDict& state) override {
    StateReader reader(*this, state);
    const double lr = reader.hyperparameter("lr"), momentum = reader.hyperparameter("momentum");
    std::vector<ringgrad::Tensor> velocity(params().size());
    for (size_t i = 0; i < params().size(); ++i)
      if (reader.has_state(i)) velocity[i] = reader.state_like_param(i, "momentum_buffer");
    reader.finish();
    set_lr(lr);
    momentum_ = momentum;
    velocity_ = std::move(velocity);
  }

 private:
  double momentum_;
  std::vector<ringgrad::Tensor> velocity_;
};
