// kernels/cpu/unary.cpp: elementwise y = f(x) and its backward dx = dy * f'(saved), on dense arrays.
//
// Budget: forward reads n and writes n elements (8 B each way per float); backward reads two arrays
// and writes one. The arithmetic ops (neg, relu, scalar add/mul) are memory-bound and vectorised;
// the transcendental ones (exp, tanh, erf) call libm per element and are bound by it instead.
// The switch on the op sits outside the loop, so each loop body is one inlined function.
#include <cmath>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"

namespace ringgrad {
namespace {

template <typename T, typename F>
void map(const T* x, T* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

// dx[i] = f(saved[i], dy[i]) for the derivatives that need the saved x or y.
template <typename T, typename F>
void map_saved(const T* saved, const T* dy, T* dx, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) dx[i] = f(saved[i], dy[i]);
}

template <typename T>
void unary_forward(UnaryOp op, const T* x, T* y, int64_t n, T alpha) {
  switch (op) {
    case UnaryOp::Neg: return map(x, y, n, [](T v) { return -v; });
    case UnaryOp::Exp: return map(x, y, n, [](T v) { return std::exp(v); });
    case UnaryOp::Log: return map(x, y, n, [](T v) { return std::log(v); });
    case UnaryOp::Sqrt: return map(x, y, n, [](T v) { return std::sqrt(v); });
    case UnaryOp::Relu: return map(x, y, n, [](T v) { return cpu::relu(v); });
    case UnaryOp::GeluTanh: return map(x, y, n, [](T v) { return cpu::gelu_tanh(v); });
    case UnaryOp::GeluErf: return map(x, y, n, [](T v) { return cpu::gelu_erf(v); });
    case UnaryOp::Tanh: return map(x, y, n, [](T v) { return std::tanh(v); });
    // 1/(1 + e^-x): for very negative x, e^-x overflows to inf and the result is the correct 0.
    case UnaryOp::Sigmoid: return map(x, y, n, [](T v) { return T(1) / (T(1) + std::exp(-v)); });
    case UnaryOp::AddScalar: return map(x, y, n, [alpha](T v) { return v + alpha; });
    case UnaryOp::MulScalar: return map(x, y, n, [alpha](T v) { return v * alpha; });
    case UnaryOp::RDivScalar: return map(x, y, n, [alpha](T v) { return alpha / v; });
    case UnaryOp::PowScalar:
      // Squaring (MSE) is common enough to skip pow()'s general path; x*x is what pow(x, 2) rounds to.
      if (alpha == T(2)) return map(x, y, n, [](T v) { return v * v; });
      return map(x, y, n, [alpha](T v) { return std::pow(v, alpha); });
  }
}

template <typename T>
void unary_backward_typed(UnaryOp op, const T* s, const T* dy, T* dx, int64_t n, T alpha) {
  switch (op) {
    case UnaryOp::Neg: return map(dy, dx, n, [](T g) { return -g; });
    case UnaryOp::Exp: return map_saved(s, dy, dx, n, [](T y, T g) { return g * y; });
    case UnaryOp::Log: return map_saved(s, dy, dx, n, [](T x, T g) { return g / x; });
    case UnaryOp::Sqrt: return map_saved(s, dy, dx, n, [](T y, T g) { return g / (T(2) * y); });
    case UnaryOp::Relu: return map_saved(s, dy, dx, n, [](T y, T g) { return y > T(0) ? g : T(0); });
    case UnaryOp::GeluTanh: return map_saved(s, dy, dx, n, [](T x, T g) { return g * cpu::gelu_tanh_derivative(x); });
    case UnaryOp::GeluErf: return map_saved(s, dy, dx, n, [](T x, T g) { return g * cpu::gelu_erf_derivative(x); });
    case UnaryOp::Tanh: return map_saved(s, dy, dx, n, [](T y, T g) { return g * (T(1) - y * y); });
    case UnaryOp::Sigmoid: return map_saved(s, dy, dx, n, [](T y, T g) { return g * y * (T(1) - y); });
    case UnaryOp::AddScalar: return map(dy, dx, n, [](T g) { return g; });
    case UnaryOp::MulScalar: return map(dy, dx, n, [alpha](T g) { return g * alpha; });
    case UnaryOp::RDivScalar: return map_saved(s, dy, dx, n, [alpha](T x, T g) { return -g * alpha / (x * x); });
    case UnaryOp::PowScalar:
      // x^0 is constant: its derivative is 0 everywhere, even at x = 0 where 0 * x^-1 would be NaN.
      if (alpha == T(0)) return map(dy, dx, n, [](T) { return T(0); });
      if (alpha == T(2)) return map_saved(s, dy, dx, n, [](T x, T g) { return T(2) * x * g; });
      return map_saved(s, dy, dx, n, [alpha](T x, T g) { return g * alpha * std::pow(x, alpha - T(1)); });
  }
}

}  // namespace

void CpuBackend::unary(UnaryOp op, DType dt, const void* x, void* y, int64_t n, double alpha, Stream) {
  cpu::dispatch_floating("unary", dt, [&](auto zero) {
    using T = decltype(zero);
    unary_forward<T>(op, static_cast<const T*>(x), static_cast<T*>(y), n, static_cast<T>(alpha));
  });
}

void CpuBackend::unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n,
                                double alpha, Stream) {
  cpu::dispatch_floating("unary_backward", dt, [&](auto zero) {
    using T = decltype(zero);
    unary_backward_typed<T>(op, static_cast<const T*>(saved), static_cast<const T*>(dy), static_cast<T*>(dx), n,
                            static_cast<T>(alpha));
  });
}

}  // namespace ringgrad
