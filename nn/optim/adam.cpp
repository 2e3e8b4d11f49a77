// nn/optim/adam.cpp: Adam and AdamW -- checks, the step (one fused kernel per parameter), state.
#include <ringgrad/nn/optim/adam.h>

#include <cmath>

#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace nn {
namespace optim {

AdamBase::AdamBase(std::vector<Tensor> params, double lr, const Hyperparameters& hyper, bool decoupled)
    : Optimizer(std::move(params)),
      hyper_(hyper),
      decoupled_(decoupled),
      steps_(params_.size(), 0),
      exp_avgs_(params_.size()),
      exp_avg_sqs_(params_.size()) {
  check(name(), lr, hyper_);
  set_lr(lr);
}

// PyTorch's checks, with its wording.
void AdamBase::check(const char* where, double lr, const Hyperparameters& h) const {
  RINGGRAD_CHECK(lr >= 0.0, where, ": invalid learning rate: ", lr, " (expected >= 0)");
  RINGGRAD_CHECK(h.eps >= 0.0, where, ": invalid epsilon value: ", h.eps, " (expected >= 0)");
  RINGGRAD_CHECK(h.beta1 >= 0.0 && h.beta1 < 1.0, where, ": invalid beta parameter at index 0: ", h.beta1,
                 " (expected 0 <= beta1 < 1)");
  RINGGRAD_CHECK(h.beta2 >= 0.0 && h.beta2 < 1.0, where, ": invalid beta parameter at index 1: ", h.beta2,
                 " (expected 0 <= beta2 < 1)");
  RINGGRAD_CHECK(h.weight_decay >= 0.0, where, ": invalid weight_decay value: ", h.weight_decay, " (expected >= 0)");
}

void AdamBase::step() {
  AdamStepArgs args;
  args.lr = lr();
  args.beta1 = hyper_.beta1;
  args.beta2 = hyper_.beta2;
  args.eps = hyper_.eps;
  args.weight_decay = hyper_.weight_decay;
  args.decoupled_weight_decay = decoupled_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = dense_grad(i);
    if (!g.defined()) continue;
    const Tensor& p = params_[i];
    if (!exp_avgs_[i].defined()) {
      exp_avgs_[i] = zeros_like(p);
      exp_avg_sqs_[i] = zeros_like(p);
    }
    args.step = ++steps_[i];
    adam_step_(p, g, exp_avgs_[i], exp_avg_sqs_[i], args, name());
  }
}

nn::StateDict AdamBase::state_dict() const {
  nn::StateDict out = group_state({{"lr", lr()},
                                   {"beta1", hyper_.beta1},
                                   {"beta2", hyper_.beta2},
                                   {"eps", hyper_.eps},
                                   {"weight_decay", hyper_.weight_decay},
                                   {"decoupled_weight_decay", decoupled_ ? 1.0 : 0.0}});
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avgs_[i].defined()) continue;
    // PyTorch keeps `step` as a float tensor on the CPU (a host counter, never a device sync).
    out[state_key(i, "step")] = scalar_tensor(static_cast<double>(steps_[i]), TensorOptions(DType::f64));
    out[state_key(i, "exp_avg")] = exp_avgs_[i].clone();
    out[state_key(i, "exp_avg_sq")] = exp_avg_sqs_[i].clone();
  }
  return out;
}

void AdamBase::load_state_dict(const nn::StateDict& state) {
  const std::string where = std::string(name()) + ".load_state_dict";
  StateReader reader(*this, state);
  const double lr = reader.hyperparameter("lr");
  Hyperparameters h{};
  h.beta1 = reader.hyperparameter("beta1");
  h.beta2 = reader.hyperparameter("beta2");
  h.eps = reader.hyperparameter("eps");
  h.weight_decay = reader.hyperparameter("weight_decay");
  const bool decoupled = reader.hyperparameter("decoupled_weight_decay") != 0.0;
  RINGGRAD_CHECK(decoupled == decoupled_, where, ": param_groups.0.decoupled_weight_decay: expected ",
                 decoupled_ ? 1 : 0, " (", name(), "), got ", decoupled ? 1 : 0, " (the state of ",
                 decoupled ? "AdamW" : "Adam", ")");
  check(where.c_str(), lr, h);
  std::vector<int64_t> steps(params_.size(), 0);
  std::vector<Tensor> exp_avgs(params_.size()), exp_avg_sqs(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!reader.has_state(i)) continue;
    const double step = reader.state_scalar(i, "step");
    RINGGRAD_CHECK(step >= 1.0 && step == std::floor(step) && step < 9.0e15, where, ": ", state_key(i, "step"),
                   ": expected a whole number >= 1, got ", step);
    steps[i] = static_cast<int64_t>(step);
    exp_avgs[i] = reader.state_like_param(i, "exp_avg");
    exp_avg_sqs[i] = reader.state_like_param(i, "exp_avg_sq");
  }
  reader.finish();
  // Everything was checked: only now does anything change.
  hyper_ = h;
  set_lr(lr);
  steps_ = std::move(steps);
  exp_avgs_ = std::move(exp_avgs);
  exp_avg_sqs_ = std::move(exp_avg_sqs);
}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : AdamBase(std::move(params), options.lr(),
               {options.betas().first, options.betas().second, options.eps(), options.weight_decay()},
               /*decoupled=*/false) {}

AdamOptions Adam::options() const {
  return AdamOptions(lr()).betas(hyper_.beta1, hyper_.beta2).eps(hyper_.eps).weight_decay(hyper_.weight_decay);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& options)
    : AdamBase(std::move(params), options.lr(),
               {options.betas().first, options.betas().second, options.eps(),
                options.has_weight_decay() ? options.weight_decay() : kDefaultWeightDecay},
               /*decoupled=*/true) {}

AdamOptions AdamW::options() const {
  return AdamOptions(lr()).betas(hyper_.beta1, hyper_.beta2).eps(hyper_.eps).weight_decay(hyper_.weight_decay);
}

}  // namespace optim
}  // namespace nn
}  // namespace ringgrad
