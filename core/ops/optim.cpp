// core/ops/optim.cpp: the fused optimizer steps and in-place scaling (core/ops.h states the rules).
//
// Not differentiable and never recorded: an optimizer step is an update of leaves, the way PyTorch
// runs it under torch.no_grad(). The kernels update memory element by element in place, so every
// tensor they touch must be dense and agree with the parameter in shape, dtype and device.
#include "core/ops/op_utils.h"

namespace ringgrad {
namespace {

void check_param(const char* op, const Tensor& param) {
  ops::check_floating(op, param, "param");
  RINGGRAD_CHECK(param.is_contiguous(), op, ": expected a dense param, got shape ", param.shape(), " with strides ",
                 param.strides(), "; optimizers update dense parameters only");
}

// A gradient or a piece of optimizer state, checked against the parameter it belongs to.
void check_like_param(const char* op, const Tensor& param, const Tensor& t, const char* what) {
  ops::check_defined(op, t, what);
  RINGGRAD_CHECK(t.shape() == param.shape() && t.dtype() == param.dtype() && t.device() == param.device(), op,
                 ": param is ", param.dtype(), param.shape(), " on ", param.device(), " but its ", what, " is ",
                 t.dtype(), t.shape(), " on ", t.device());
  RINGGRAD_CHECK(t.is_contiguous(), op, ": expected a dense ", what, ", got shape ", t.shape(), " with strides ",
                 t.strides());
}

}  // namespace

void sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStepArgs& args,
               const char* op) {
  check_param(op, param);
  check_like_param(op, param, grad, "grad");
  const bool momentum = args.momentum != 0.0;
  if (momentum) check_like_param(op, param, momentum_buffer, "momentum_buffer");
  if (param.numel() == 0) return;
  ops::backend_of(param, op).sgd_step(param.dtype(), param.data(), grad.data(),
                                      momentum ? momentum_buffer.data() : nullptr, param.numel(), args,
                                      ops::stream_of(param));
}

void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamStepArgs& args, const char* op) {
  check_param(op, param);
  check_like_param(op, param, grad, "grad");
  check_like_param(op, param, exp_avg, "exp_avg");
  check_like_param(op, param, exp_avg_sq, "exp_avg_sq");
  RINGGRAD_CHECK(args.step >= 1, op, ": expected step >= 1 (1-based, already incremented), got ", args.step);
  if (param.numel() == 0) return;
  ops::backend_of(param, op).adam_step(param.dtype(), param.data(), grad.data(), exp_avg.data(), exp_avg_sq.data(),
                                       param.numel(), args, ops::stream_of(param));
}

void mul_(const Tensor& x, double s, const char* op) {
  ops::check_floating(op, x);
  RINGGRAD_CHECK(x.is_contiguous(), op, ": expected a dense x, got shape ", x.shape(), " with strides ", x.strides());
  if (x.numel() == 0) return;
  ops::backend_of(x, op).unary(kernels::UnaryOp::MulScalar, x.dtype(), x.data(), x.data(), x.numel(), s,
                               ops::stream_of(x));
}

}  // namespace ringgrad
