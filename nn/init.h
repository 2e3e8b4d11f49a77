/// @file
/// nn/init.h: parameter initialisation, with PyTorch's defaults.
#pragma once

#include <ringgrad/core/generator.h>
#include <ringgrad/core/tensor.h>

namespace ringgrad {
namespace nn {
namespace init {

/// Values uniform in [low, high).
Tensor uniform(const Shape& shape, double low, double high, TensorOptions options = {},
               Generator& generator = default_generator());

/// Kaiming-uniform as torch.nn.init.kaiming_uniform_(w, a) with leaky-ReLU gain sqrt(2 / (1 + a^2)):
/// bound = gain * sqrt(3 / fan_in). PyTorch's Linear uses a = sqrt(5), which makes bound = 1/sqrt(fan_in).
Tensor kaiming_uniform(const Shape& shape, int64_t fan_in, double a, TensorOptions options = {},
                       Generator& generator = default_generator());

}  // namespace init
}  // namespace nn
}  // namespace ringgrad
