// nn/linear.cpp: Linear's parameters and forward.
#include <ringgrad/nn/linear.h>

#include <cmath>
#include <ostream>

#include <ringgrad/core/ops.h>
#include <ringgrad/nn/init.h>

namespace ringgrad {
namespace nn {

Linear::Linear(const LinearOptions& opts) : options(opts) {
  RINGGRAD_CHECK(opts.in_features() > 0 && opts.out_features() > 0,
                 "Linear: expected positive sizes, got in_features=", opts.in_features(),
                 " and out_features=", opts.out_features());
  reset();
}

void Linear::reset() {
  const int64_t in = options.in_features(), out = options.out_features();
  weight = register_parameter("weight", init::kaiming_uniform({out, in}, in, std::sqrt(5.0), options.dtype()));
  if (options.bias()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    bias = register_parameter("bias", init::uniform({out}, -bound, bound, options.dtype()));
  } else {
    bias = Tensor();
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias, options.activation()); }

void Linear::pretty_print(std::ostream& os) const {
  os << "Linear(in_features=" << options.in_features() << ", out_features=" << options.out_features()
     << ", bias=" << (options.bias() ? "true" : "false");
  if (options.activation() == Activation::Relu) os << ", activation=relu";
  if (options.activation() == Activation::GeluTanh) os << ", activation=gelu_tanh";
  os << ')';
}

}  // namespace nn
}  // namespace ringgrad
