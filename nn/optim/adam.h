/// @file
/// nn/optim/adam.h: Adam and AdamW (Kingma & Ba 2015; Loshchilov & Hutter 2019).
///
/// PyTorch 1.13's rule, per parameter p with gradient g at step t (1-based):
/// @code
///   Adam : g = g + weight_decay p                (L2 penalty folded into the gradient)
///   AdamW: p = p (1 - lr weight_decay)           (decoupled decay, applied to the parameter)
///   m = beta1 m + (1 - beta1) g
///   v = beta2 v + (1 - beta2) g^2
///   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
/// @endcode
/// The two bias corrections undo the zero initialisation of m and v. The whole update is one fused
/// kernel per parameter (Backend::adam_step). amsgrad and maximize are not implemented.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/nn/optim/optimizer.h>

namespace ringgrad {
namespace nn {
namespace optim {

/// PyTorch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, and weight_decay 0 for Adam but 1e-2
/// for AdamW: one options type serves both, and a weight_decay left unset takes the optimizer's default.
class AdamOptions {
 public:
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  RINGGRAD_ARG(double, lr);          ///< the learning rate
  RINGGRAD_ARG(double, eps) = 1e-8;  ///< added to the denominator sqrt(v) for stability

 public:
  /// The decay rates of the first and second moment estimates.
  AdamOptions& betas(double beta1, double beta2) {
    beta1_ = beta1;
    beta2_ = beta2;
    return *this;
  }
  /// L2 penalty (Adam) or decoupled decay (AdamW); unset, each takes its own default.
  AdamOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  std::pair<double, double> betas() const { return {beta1_, beta2_}; }  ///< (beta1, beta2)
  /// The value set, else Adam's default 0; AdamW uses 1e-2 when has_weight_decay() is false.
  double weight_decay() const { return weight_decay_.value_or(0.0); }
  bool has_weight_decay() const { return weight_decay_.has_value(); }  ///< whether weight_decay() was called

 private:
  double beta1_ = 0.9, beta2_ = 0.999;
  std::optional<double> weight_decay_;
};

/// The same type under the PyTorch C++ frontend's name: AdamWOptions(3e-4) leaves weight_decay unset,
/// so AdamW applies its default 1e-2.
using AdamWOptions = AdamOptions;

/// What Adam and AdamW share: everything but where the weight decay goes.
class AdamBase : public Optimizer {
 public:
  const char* name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  void step() override;
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;

 protected:
  /// Everything of AdamOptions but the lr (which the base class holds and schedulers change).
  struct Hyperparameters {
    ///@{
    /// as AdamOptions
    double beta1, beta2, eps, weight_decay;
    ///@}
  };
  /// `decoupled`: AdamW (decay the parameter) rather than Adam (decay folded into the gradient).
  AdamBase(std::vector<Tensor> params, double lr, const Hyperparameters& hyper, bool decoupled);
  Hyperparameters hyper_;  ///< as given, checked

 private:
  void check(const char* where, double lr, const Hyperparameters& h) const;
  bool decoupled_;
  // Per parameter; undefined (and step 0) until the parameter's first step.
  std::vector<int64_t> steps_;
  std::vector<Tensor> exp_avgs_, exp_avg_sqs_;
};

/// Adam, with the weight decay (if any) added to the gradient as an L2 penalty.
class Adam : public AdamBase {
 public:
  /// Throws as PyTorch does on a negative lr, eps or weight_decay, or a beta outside [0, 1).
  explicit Adam(std::vector<Tensor> params, const AdamOptions& options = AdamOptions());
  AdamOptions options() const;  ///< lr as the scheduler left it
};

/// Adam with decoupled weight decay; weight_decay defaults to 1e-2, as in PyTorch.
class AdamW : public AdamBase {
 public:
  static constexpr double kDefaultWeightDecay = 1e-2;  ///< when the options leave weight_decay unset
  /// Throws as Adam's constructor does.
  explicit AdamW(std::vector<Tensor> params, const AdamOptions& options = AdamOptions());
  AdamOptions options() const;  ///< lr as the scheduler left it; weight_decay as applied
};

}  // namespace optim
}  // namespace nn
}  // namespace ringgrad
