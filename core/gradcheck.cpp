// core/gradcheck.cpp: finite-difference check of autograd gradients (see gradcheck.h).
#include <ringgrad/core/gradcheck.h>

#include <cmath>
#include <sstream>

#include <ringgrad/core/autograd/engine.h>
#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace {

// Pointer to element `flat` (row-major order over the shape) of a possibly strided CPU tensor.
double* element(const Tensor& t, int64_t flat) {
  int64_t offset = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    offset += (flat % t.size(d)) * t.stride(d);
    flat /= t.size(d);
  }
  return static_cast<double*>(t.data()) + offset;
}

std::vector<double> evaluate(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                             const std::vector<Tensor>& inputs) {
  NoGradGuard no_grad;
  return fn(inputs).to_vector<double>();
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const GradcheckResult& r) {
  return os << (r.ok ? "gradcheck passed" : "gradcheck failed:\n" + r.report);
}

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    RINGGRAD_CHECK(t.dtype() == DType::f64 && t.device().is_cpu(), "gradcheck: expected inputs[", i,
                   "] to be a float64 CPU tensor (finite differences need the precision), got ", t.dtype(), " on ",
                   t.device());
    RINGGRAD_CHECK(t.is_leaf(), "gradcheck: expected inputs[", i, "] to be a leaf (use .detach().requires_grad_())");
  }

  // Analytic Jacobian, one backward per output element: row o holds d out[o] / d inputs.
  const Tensor out = fn(inputs);
  RINGGRAD_CHECK(out.dtype() == DType::f64, "gradcheck: expected fn to return float64, got ", out.dtype());
  // numel() is a count, never negative: size_t indexes the Jacobian's rows directly.
  const auto n_out = static_cast<size_t>(out.numel());
  std::vector<std::vector<std::vector<double>>> analytic(inputs.size());  // [input][out][element]
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) analytic[i].assign(n_out, {});
  if (out.requires_grad()) {
    for (size_t o = 0; o < n_out; ++o) {
      for (const Tensor& t : inputs)
        if (t.defined() && t.requires_grad()) t.set_grad(Tensor());
      std::vector<double> onehot(n_out, 0.0);
      onehot[o] = 1.0;
      run_backward({out}, {from_vector(onehot, out.shape())}, /*retain_graph=*/true);
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (analytic[i].empty()) continue;
        const Tensor g = inputs[i].grad();
        analytic[i][o] =
            g.defined() ? g.to_vector<double>() : std::vector<double>(static_cast<size_t>(inputs[i].numel()), 0.0);
      }
    }
  }

  // Numeric Jacobian by central differences, compared element by element.
  GradcheckResult result;
  std::ostringstream report;
  int failures = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (analytic[i].empty() && !(inputs[i].defined() && inputs[i].requires_grad())) continue;
    const Tensor& t = inputs[i];
    for (int64_t j = 0; j < t.numel(); ++j) {
      double* x = element(t, j);
      const double saved = *x;
      *x = saved + options.eps();
      const std::vector<double> plus = evaluate(fn, inputs);
      *x = saved - options.eps();
      const std::vector<double> minus = evaluate(fn, inputs);
      *x = saved;
      for (size_t o = 0; o < n_out; ++o) {
        const double numeric = (plus[o] - minus[o]) / (2 * options.eps());
        const double exact =
            analytic[i].empty() || analytic[i][o].empty() ? 0.0 : analytic[i][o][static_cast<size_t>(j)];
        if (std::fabs(exact - numeric) <= options.atol() + options.rtol() * std::fabs(numeric)) continue;
        result.ok = false;
        if (failures++ < options.max_failures_reported())
          report << "  input " << i << " element " << j << ", output " << o << ": analytic " << exact << ", numeric "
                 << numeric << "\n";
      }
    }
    t.set_grad(Tensor());
  }
  if (failures > options.max_failures_reported())
    report << "  ... and " << failures - options.max_failures_reported() << " more\n";
  result.report = report.str();
  return result;
}

GradcheckResult gradcheck(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                          const GradcheckOptions& options) {
  return gradcheck([&fn](const std::vector<Tensor>& in) { return fn(in[0]); }, std::vector<Tensor>{input}, options);
}

}  // namespace ringgrad
