/// @file
/// core/base/op_params.h: the parameters of fused ops that core's op API (core/ops.h) and the kernels
/// (kernels/backend.h) both take -- the GEMM epilogue's activation and the optimizer steps'
/// hyperparameters. Base-layer vocabulary, so a caller of the op never needs a kernel header.
#pragma once

#include <cstdint>

namespace ringgrad {

/// Activation applied in the GEMM epilogue, after the bias: Linear+ReLU in one pass over C.
enum class Activation : uint8_t { None, Relu, GeluTanh };

/// Hyperparameters of one SGD step (PyTorch's names).
struct SgdStepArgs {
  ///@{
  /// as nn::optim::SGDOptions
  double lr = 0.0, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  ///@}
  bool nesterov = false;    ///< as nn::optim::SGDOptions
  bool first_step = false;  ///< the momentum buffer is uninitialised and becomes d_p, as in PyTorch
};

/// Hyperparameters of one Adam/AdamW step.
struct AdamStepArgs {
  ///@{
  /// as nn::optim::AdamOptions
  double lr = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  ///@}
  bool decoupled_weight_decay = false;  ///< AdamW: decay the parameter, not the gradient
  int64_t step = 1;                     ///< 1-based, already incremented for this step
};

}  // namespace ringgrad
