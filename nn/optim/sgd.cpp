// nn/optim/sgd.cpp: SGD's checks, its step (one fused kernel per parameter) and its state.
#include <ringgrad/nn/optim/sgd.h>

#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace nn {
namespace optim {

namespace {

// PyTorch's checks, with its wording where it has one.
void check_options(const char* where, const SGDOptions& o) {
  RINGGRAD_CHECK(o.lr() >= 0.0, where, ": invalid learning rate: ", o.lr(), " (expected >= 0)");
  RINGGRAD_CHECK(o.momentum() >= 0.0, where, ": invalid momentum value: ", o.momentum(), " (expected >= 0)");
  RINGGRAD_CHECK(o.weight_decay() >= 0.0, where, ": invalid weight_decay value: ", o.weight_decay(),
                 " (expected >= 0)");
  RINGGRAD_CHECK(!o.nesterov() || (o.momentum() > 0.0 && o.dampening() == 0.0), where,
                 ": Nesterov momentum requires a momentum > 0 and zero dampening, got momentum ", o.momentum(),
                 " and dampening ", o.dampening());
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : Optimizer(std::move(params)), options_(options), momentum_buffers_(params_.size()) {
  check_options("SGD", options_);
  set_lr(options_.lr());
}

void SGD::step() {
  SgdStepArgs args;
  args.lr = lr();
  args.momentum = options_.momentum();
  args.dampening = options_.dampening();
  args.weight_decay = options_.weight_decay();
  args.nesterov = options_.nesterov();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = dense_grad(i);
    if (!g.defined()) continue;
    const Tensor& p = params_[i];
    Tensor& buf = momentum_buffers_[i];
    args.first_step = false;
    if (args.momentum != 0.0 && !buf.defined()) {
      buf = empty_like(p);  // the kernel writes d_p into it: PyTorch's torch.clone(d_p)
      args.first_step = true;
    }
    sgd_step_(p, g, buf, args, "SGD.step");
  }
}

nn::StateDict SGD::state_dict() const {
  nn::StateDict out = group_state({{"lr", lr()},
                                   {"momentum", options_.momentum()},
                                   {"dampening", options_.dampening()},
                                   {"weight_decay", options_.weight_decay()},
                                   {"nesterov", options_.nesterov() ? 1.0 : 0.0}});
  for (size_t i = 0; i < params_.size(); ++i)
    if (momentum_buffers_[i].defined()) out[state_key(i, "momentum_buffer")] = momentum_buffers_[i].clone();
  return out;
}

void SGD::load_state_dict(const nn::StateDict& state) {
  StateReader reader(*this, state);
  SGDOptions options = SGDOptions(reader.hyperparameter("lr"))
                           .momentum(reader.hyperparameter("momentum"))
                           .dampening(reader.hyperparameter("dampening"))
                           .weight_decay(reader.hyperparameter("weight_decay"))
                           .nesterov(reader.hyperparameter("nesterov") != 0.0);
  check_options("SGD.load_state_dict", options);
  std::vector<Tensor> buffers(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    if (reader.has_state(i)) buffers[i] = reader.state_like_param(i, "momentum_buffer");
  reader.finish();
  // Everything was checked: only now does anything change.
  options_ = options;
  set_lr(options_.lr());
  momentum_buffers_ = std::move(buffers);
}

}  // namespace optim
}  // namespace nn
}  // namespace ringgrad
