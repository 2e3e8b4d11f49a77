// nn/init.cpp: uniform and Kaiming-uniform initialisation.
#include <ringgrad/nn/init.h>

#include <cmath>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace nn {
namespace init {

Tensor uniform(const Shape& shape, double low, double high, TensorOptions options, Generator& generator) {
  RINGGRAD_CHECK(low <= high, "init::uniform: expected low <= high, got ", low, " and ", high);
  NoGradGuard no_grad;
  return rand(shape, options, generator) * (high - low) + low;
}

Tensor kaiming_uniform(const Shape& shape, int64_t fan_in, double a, TensorOptions options, Generator& generator) {
  RINGGRAD_CHECK(fan_in > 0, "init::kaiming_uniform: expected fan_in > 0, got ", fan_in);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in));
  return uniform(shape, -bound, bound, options, generator);
}

}  // namespace init
}  // namespace nn
}  // namespace ringgrad
