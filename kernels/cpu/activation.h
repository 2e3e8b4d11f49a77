// kernels/cpu/activation.h: the scalar activation functions and their derivatives, shared by the
// elementwise kernels (unary.cpp) and the GEMM epilogue (gemm.cpp) so both compute the same values.
#pragma once

#include <cmath>

namespace ringgrad {
namespace cpu {

constexpr double kSqrt2OverPi = 0.79788456080286535587989211986876;  // sqrt(2/pi)
constexpr double kInvSqrt2 = 0.70710678118654752440084436210485;     // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267793994605993438;   // 1/sqrt(2 pi)
constexpr double kGeluCubic = 0.044715;

template <typename T>
inline T relu(T x) {
  return x > T(0) ? x : T(0);
}

// GELU, tanh approximation: x/2 (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3).
template <typename T>
inline T gelu_tanh(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}

// d/dx of the above: (1 + t)/2 + x/2 (1 - t^2) du/dx,  t = tanh(u),  du/dx = sqrt(2/pi)(1 + 3*0.044715 x^2).
template <typename T>
inline T gelu_tanh_derivative(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
  const T t = std::tanh(u);
  const T du_dx = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du_dx;
}

// Exact GELU: x Phi(x) = x/2 (1 + erf(x / sqrt 2)), Phi the standard normal CDF.
template <typename T>
inline T gelu_erf(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(kInvSqrt2)));
}

// d/dx (x Phi(x)) = Phi(x) + x phi(x),  phi(x) = e^(-x^2/2) / sqrt(2 pi).
template <typename T>
inline T gelu_erf_derivative(T x) {
  const T cdf = T(0.5) * (T(1) + std::erf(x * T(kInvSqrt2)));
  const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
  return cdf + x * pdf;
}

}  // namespace cpu
}  // namespace ringgrad
