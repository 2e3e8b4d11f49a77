/// @file
/// nn/optim/sgd.h: stochastic gradient descent with momentum, dampening, Nesterov and weight decay.
///
/// PyTorch 1.13's rule, per parameter p with gradient g:
/// @code
///   d = g + weight_decay p
///   with momentum:  buf = d on the first step, else momentum buf + (1 - dampening) d
///                   d   = nesterov ? d + momentum buf : buf
///   p -= lr d
/// @endcode
/// The whole update is one fused kernel per parameter (Backend::sgd_step).
#pragma once

#include <vector>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/nn/optim/optimizer.h>

namespace ringgrad {
namespace nn {
namespace optim {

/// nn::optim::SGDOptions(0.1).momentum(0.9).nesterov(true): each setter returns *this, each getter of the
/// same name reads the value. The learning rate has no default, as in PyTorch.
class SGDOptions {
 public:
  explicit SGDOptions(double lr) : lr_(lr) {}
  RINGGRAD_ARG(double, lr);                  ///< the learning rate
  RINGGRAD_ARG(double, momentum) = 0.0;      ///< 0: plain SGD, no momentum buffer
  RINGGRAD_ARG(double, dampening) = 0.0;     ///< scales the new gradient's share of the momentum buffer
  RINGGRAD_ARG(bool, nesterov) = false;      ///< Nesterov momentum (needs momentum > 0, dampening 0)
  RINGGRAD_ARG(double, weight_decay) = 0.0;  ///< L2 penalty added to the gradient
};

/// Stochastic gradient descent, with momentum, dampening, Nesterov and weight decay as SGDOptions set.
class SGD : public Optimizer {
 public:
  /// Throws as PyTorch does on a negative lr, momentum or weight_decay, and on Nesterov without
  /// momentum > 0 and dampening == 0.
  SGD(std::vector<Tensor> params, const SGDOptions& options);

  const char* name() const override { return "SGD"; }
  void step() override;
  SGDOptions options() const { return SGDOptions(options_).lr(lr()); }  ///< lr as the scheduler left it

  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;

 private:
  SGDOptions options_;                    // lr() is the current learning rate, not options_.lr()
  std::vector<Tensor> momentum_buffers_;  // per parameter; undefined until its first step with momentum
};

}  // namespace optim
}  // namespace nn
}  // namespace ringgrad
