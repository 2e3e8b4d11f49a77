/// @file
/// nn/optim/clip_grad_norm.h: rescale gradients so that their joint norm is at most max_norm.
#pragma once

#include <vector>

#include <ringgrad/core/tensor.h>

namespace ringgrad {
namespace nn {
namespace optim {

/// The norm of all gradients of `params` taken together, as if concatenated into one vector:
/// (sum_i |g_i|^p)^(1/p), or max_i |g_i| for norm_type = infinity. Parameters without a gradient are
/// skipped. When max_norm / (total + 1e-6) < 1, every gradient is multiplied in place by that factor
/// (PyTorch's rule: the 1e-6 keeps a zero norm from dividing by zero). Returns the total norm, before
/// clipping. Call between backward() and step():
/// @code
///   loss.backward();
///   optim::clip_grad_norm_(model->parameters(), 1.0);
///   opt.step();
/// @endcode
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace optim
}  // namespace nn
}  // namespace ringgrad
