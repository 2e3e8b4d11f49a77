// nn/optim/clip_grad_norm.cpp: the joint gradient norm, and the in-place rescaling, as PyTorch 1.13's
// torch.nn.utils.clip_grad_norm_ computes them.
#include <ringgrad/nn/optim/clip_grad_norm.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace nn {
namespace optim {

namespace {

// |g| elementwise, exactly: relu(g) + relu(-g) adds a value and an exact zero.
Tensor abs_of(const Tensor& g) { return relu(g) + relu(neg(g)); }

// What the host needs of one tensor for ||g||_p (p > 0 or infinity), still on g's device, in g's
// dtype, as one element: max |g|, or the sum of |g|^p. Nothing here waits for the device.
Tensor partial_norm(const Tensor& g, double p) {
  if (std::isinf(p)) return max(abs_of(g).flatten(), 0).first.reshape({1});
  if (p == 2.0) return sum(g * g).reshape({1});
  if (p == 1.0) return sum(abs_of(g)).reshape({1});
  return sum(pow(abs_of(g), p)).reshape({1});
}

// ||g||_p from its partial_norm.
double finish_norm(double partial, double p) {
  if (std::isinf(p) || p == 1.0) return partial;
  return p == 2.0 ? std::sqrt(partial) : std::pow(partial, 1.0 / p);
}

// The partial norms of every tensor, brought to the host with one copy per device (one host
// synchronisation per GPU, not one per parameter). float64 holds every float32, bfloat16 and float16
// value exactly, so they travel as float64 without changing a bit.
std::vector<double> partial_norms(const std::vector<Tensor>& grads, double p) {
  std::vector<double> found(grads.size(), 0.0);
  std::vector<Device> devices;
  for (const Tensor& g : grads)
    if (std::find(devices.begin(), devices.end(), g.device()) == devices.end()) devices.push_back(g.device());
  for (const Device& device : devices) {
    std::vector<Tensor> parts;
    std::vector<size_t> which;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].device() != device || grads[i].numel() == 0) continue;
      parts.push_back(partial_norm(grads[i], p).to(DType::f64));
      which.push_back(i);
    }
    if (parts.empty()) continue;
    const std::vector<double> values = cat(parts, 0).to_vector<double>();
    for (size_t j = 0; j < which.size(); ++j) found[which[j]] = values[j];
  }
  return found;
}

// PyTorch computes the factor as a tensor in the gradients' dtype: max_norm * (1 / (total + 1e-6)).
template <typename T>
double clip_coefficient(double total_norm, double max_norm) {
  const T denom = static_cast<T>(total_norm) + static_cast<T>(1e-6);
  return static_cast<double>((T(1) / denom) * static_cast<T>(max_norm));
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  RINGGRAD_CHECK(norm_type > 0.0, "clip_grad_norm_: expected norm_type > 0 (or infinity), got ", norm_type);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    RINGGRAD_CHECK(p.defined(),
                   "clip_grad_norm_: expected every parameter to be a defined tensor, got an undefined one");
    const Tensor g = p.grad();
    if (g.defined()) grads.push_back(g);
  }
  if (grads.empty()) return 0.0;

  const bool inf = std::isinf(norm_type);
  for (const Tensor& g : grads) {
    // bfloat16 and float16 only where they compute: on CUDA.
    const DType dt = g.dtype();
    RINGGRAD_CHECK(
        dt == DType::f32 || dt == DType::f64 || ((dt == DType::bf16 || dt == DType::f16) && g.device().is_cuda()),
        "clip_grad_norm_: expected grad to be float32 or float64, got ", dt);
  }
  const std::vector<double> partials = partial_norms(grads, norm_type);
  double total = 0.0;  // max of the norms, or the sum of their p-th powers, in the parameters' order
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].numel() == 0) continue;
    const double n = finish_norm(partials[i], norm_type);
    total = inf ? std::max(total, n) : total + std::pow(n, norm_type);
  }
  if (!inf) total = norm_type == 2.0 ? std::sqrt(total) : std::pow(total, 1.0 / norm_type);

  const double coef = grads[0].dtype() == DType::f64 ? clip_coefficient<double>(total, max_norm)
                                                     : clip_coefficient<float>(total, max_norm);
  if (coef < 1.0) {  // PyTorch clamps the factor to 1 and multiplies anyway; a factor of 1 changes nothing
    for (const Tensor& p : params) {
      const Tensor g = p.grad();
      if (!g.defined() || g.numel() == 0) continue;
      if (g.is_contiguous()) {  // in place: whoever else holds this gradient (a DDP bucket) sees the change
        mul_(g, coef, "clip_grad_norm_");
      } else {
        p.set_grad(g * coef);
      }
    }
  }
  return total;
}

}  // namespace optim
}  // namespace nn
}  // namespace ringgrad
