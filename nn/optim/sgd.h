// nn/optim/sgd.h: stochastic gradient descent with momentum, dampening, Nesterov and weight decay.
//
// PyTorch 1.13's rule, per parameter p with gradient g:
//   d = g + weight_decay p
//   with momentum:  buf = d on the first step, else momentum buf + (1 - dampening) d
//                   d   = nesterov ? d + momentum buf : buf
//   p -= lr d
// The whole update is one fused kernel per parameter (Backend::sgd_step).
#pragma once

#include <vector>

#include <ringgrad/nn/optim/optimizer.h>

namespace ringgrad {
namespace optim {

// optim::SGDOptions(0.1).momentum(0.9).nesterov(true): each setter returns *this, each getter of the
// same name reads the value. The learning rate has no default, as in PyTorch.
class SGDOptions {
 public:
  explicit SGDOptions(double lr) : lr_(lr) {}
  SGDOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  SGDOptions& momentum(double v) {
    momentum_ = v;
    return *this;
  }
  SGDOptions& dampening(double v) {
    dampening_ = v;
    return *this;
  }
  SGDOptions& nesterov(bool v) {
    nesterov_ = v;
    return *this;
  }
  SGDOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  double lr() const { return lr_; }
  double momentum() const { return momentum_; }
  double dampening() const { return dampening_; }
  bool nesterov() const { return nesterov_; }
  double weight_decay() const { return weight_decay_; }

 private:
  double lr_;
  double momentum_ = 0.0;
  double dampening_ = 0.0;
  bool nesterov_ = false;
  double weight_decay_ = 0.0;
};

class SGD : public Optimizer {
 public:
  // Throws as PyTorch does on a negative lr, momentum or weight_decay, and on Nesterov without
  // momentum > 0 and dampening == 0.
  SGD(std::vector<Tensor> params, const SGDOptions& options);

  const char* name() const override { return "SGD"; }
  void step() override;
  SGDOptions options() const { return SGDOptions(options_).lr(lr()); }  // lr as the scheduler left it

  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;

 private:
  SGDOptions options_;                    // lr() is the current learning rate, not options_.lr()
  std::vector<Tensor> momentum_buffers_;  // per parameter; undefined until its first step with momentum
};

}  // namespace optim
}  // namespace ringgrad
