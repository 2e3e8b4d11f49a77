/// @file
/// core/gradcheck.h: compares autograd's gradients with central finite differences.
///
/// For each input element x_j (float64 only) the numeric derivative of every output element is
/// (f(x_j + eps) - f(x_j - eps)) / (2 eps); the analytic one comes from one backward per output
/// element. An element passes when |analytic - numeric| <= atol + rtol * |numeric|. Inputs may be
/// non-contiguous views: the perturbation is written through their strides.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/core/tensor.h>

namespace ringgrad {

/// How gradcheck compares the analytic gradient with the central-difference one.
struct GradcheckOptions {
  RINGGRAD_ARG(double, eps) = 1e-6;              ///< the central difference's step
  RINGGRAD_ARG(double, atol) = 1e-5;             ///< |analytic - numeric| <= atol + rtol |numeric| passes
  RINGGRAD_ARG(double, rtol) = 1e-3;             ///< the relative part of the tolerance
  RINGGRAD_ARG(int, max_failures_reported) = 5;  ///< mismatching elements listed in the message
};

/// The outcome of gradcheck(): converts to true when every checked element agreed.
struct GradcheckResult {
  bool ok = true;      ///< every analytic gradient matched the numeric one
  std::string report;  ///< empty when ok; otherwise input index, element, analytic and numeric values
  explicit operator bool() const { return ok; }  ///< ok
};

/// "gradcheck passed", or "gradcheck failed:" and the report.
std::ostream& operator<<(std::ostream& os, const GradcheckResult& r);

/// `fn` maps the inputs to one output tensor of any shape. Every input that requires grad is checked.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});
/// Convenience for one input.
GradcheckResult gradcheck(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                          const GradcheckOptions& options = {});

}  // namespace ringgrad
