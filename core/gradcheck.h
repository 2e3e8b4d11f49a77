// core/gradcheck.h: compares autograd's gradients with central finite differences.
//
// For each input element x_j (float64 only) the numeric derivative of every output element is
// (f(x_j + eps) - f(x_j - eps)) / (2 eps); the analytic one comes from one backward per output
// element. An element passes when |analytic - numeric| <= atol + rtol * |numeric|. Inputs may be
// non-contiguous views: the perturbation is written through their strides.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <ringgrad/core/tensor.h>

namespace ringgrad {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  int max_failures_reported = 5;
};

struct GradcheckResult {
  bool ok = true;
  std::string report;  // empty when ok; otherwise input index, element, analytic and numeric values
  explicit operator bool() const { return ok; }
};

std::ostream& operator<<(std::ostream& os, const GradcheckResult& r);

// `fn` maps the inputs to one output tensor of any shape. Every input that requires grad is checked.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});
// Convenience for one input.
GradcheckResult gradcheck(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                          const GradcheckOptions& options = {});

}  // namespace ringgrad
