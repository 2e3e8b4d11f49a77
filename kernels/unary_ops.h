/// @file
/// kernels/unary_ops.h: the table of elementwise unary ops -- one functor per op holding its forward,
/// its backward, what the backward reads and its names -- and the enum UnaryOp made from that table.
///
/// Every user of a unary op reads it from here: the CPU loop (kernels/cpu/unary.cpp), the CUDA kernel
/// (kernels/cuda/unary.cu) and the autograd op (core/ops/unary.cpp) each hold one generic loop, kernel
/// or node and call visit_unary() to reach the functor, so no file but this one switches on the op.
/// Adding an op is one functor below plus one line in RINGGRAD_UNARY_OPS (docs/kernels.md walks
/// through SiLU).
///
/// A functor F has
/// @code
///   static T F::forward(T x, T alpha)           y = f(x); `alpha` is the scalar of scalar ops
///   static T F::backward(T saved, T dy, T alpha) dx = dy * f'(.), `saved` being x or y as F::saved says
///   static constexpr Saved saved                 X, Y or None: whichever makes the derivative cheapest
///   static constexpr const char* name            the op in error messages ("gelu")
///   static constexpr const char* backward_name   its autograd node ("GeluBackward")
/// @endcode
/// T is the arithmetic type: float or double (bfloat16 and float16 are computed in float by the CUDA kernel). The
/// formulas are written once for both backends, so CPU and GPU evaluate the same expression in the same
/// order; they differ only where libm and CUDA's math library round a transcendental differently.
#pragma once

// The C functions (expf, tanhf, ...) in the global namespace are what both host and device code
// call; <cmath> does not promise them there.
#include <math.h>  // NOLINT(modernize-deprecated-headers): see above

#include <cstdint>
#include <cstring>

/// The functors run on the host and, compiled by nvcc, on the device. The kernel emulator compiles
/// kernels/cuda/*.cu with the host compiler, where __host__ __device__ mean nothing: empty is right.
#if defined(__CUDACC__)
#define RINGGRAD_HOST_DEVICE __host__ __device__
#else
#define RINGGRAD_HOST_DEVICE
#endif

/// The table: X(Name) for each functor unary_ops::Name, in the order of UnaryOp's values.
#define RINGGRAD_UNARY_OPS(X) \
  X(Neg)                      \
  X(Exp)                      \
  X(Log)                      \
  X(Sqrt)                     \
  X(Relu)                     \
  X(GeluTanh)                 \
  X(GeluErf)                  \
  X(Tanh)                     \
  X(Sigmoid)                  \
  X(AddScalar)                \
  X(MulScalar)                \
  X(RDivScalar)               \
  X(PowScalar)                \
  X(Silu)

namespace ringgrad {
namespace kernels {

/// Elementwise y = f(x), one value per functor of unary_ops (same spelling).
enum class UnaryOp : uint8_t {
#define RINGGRAD_UNARY_ENUM(Name) Name,
  RINGGRAD_UNARY_OPS(RINGGRAD_UNARY_ENUM)
#undef RINGGRAD_UNARY_ENUM
};

namespace unary_ops {

/// What unary_backward reads as its `saved` argument: the forward's input x, its output y, or nothing.
enum class Saved : uint8_t { None, X, Y };

// float and double overloads of the math functions: on the device the *f ones are CUDA's float
// functions; on the host they are what std::exp(float) and friends call.
namespace math {
RINGGRAD_HOST_DEVICE inline float exp(float x) { return ::expf(x); }
RINGGRAD_HOST_DEVICE inline double exp(double x) { return ::exp(x); }
RINGGRAD_HOST_DEVICE inline float log(float x) { return ::logf(x); }
RINGGRAD_HOST_DEVICE inline double log(double x) { return ::log(x); }
RINGGRAD_HOST_DEVICE inline float sqrt(float x) { return ::sqrtf(x); }
RINGGRAD_HOST_DEVICE inline double sqrt(double x) { return ::sqrt(x); }
RINGGRAD_HOST_DEVICE inline float tanh(float x) { return ::tanhf(x); }
RINGGRAD_HOST_DEVICE inline double tanh(double x) { return ::tanh(x); }
// erf in float. On the GPU, CUDA's erff. On the host, a rational function instead of libm's erff:
// libm is a call per element, which keeps the CPU's exact GELU loop scalar (15 ns an element here);
// this is branch-free arithmetic the compiler vectorises. x is clamped to [-4, 4], outside which
// erf(x) rounds to +-1 in float; inside, x P(x^2) / Q(x^2) with P of degree 6 and Q of degree 4 in
// x^2 -- the interpolant that XLA and Eigen (generic_fast_erf_float) use, within a few ulp (about 7
// near |x| = 3.9, where it would also step past 1: the result is clamped to [-1, 1]). The kernel
// emulator compiles device code on the host, so it computes this too, not CUDA's erff.
RINGGRAD_HOST_DEVICE inline float erf(float x) {
#ifdef __CUDA_ARCH__
  return ::erff(x);
#else
  const float c = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);
  const float c2 = c * c;
  float p = c2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = c2 * p + -2.10102402082508e-06f;
  p = c2 * p + -5.69250639462346e-05f;
  p = c2 * p + -7.34990630326855e-04f;
  p = c2 * p + -2.95459980854025e-03f;
  p = c2 * p + -1.60960333262415e-02f;
  float q = c2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
  q = c2 * q + -1.68282697438203e-03f;
  q = c2 * q + -7.37332916720468e-03f;
  q = c2 * q + -1.42647390514189e-02f;
  const float r = c * p / q;
  return r > 1.0f ? 1.0f : (r < -1.0f ? -1.0f : r);
#endif
}
RINGGRAD_HOST_DEVICE inline double erf(double x) { return ::erf(x); }

// a * b + c, fused where the host has FMA (one instruction, one rounding); where it has not, a
// multiply and an add -- fmaf would be a libm call per element there.
inline float mul_add(float a, float b, float c) {
#if defined(__FMA__)
  return ::fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

// e^x for x <= 0 (a softmax's x - max, a Gaussian's -x^2/2). On the GPU, CUDA's expf. On the host,
// a form the compiler vectorises (libm's expf is a call per element, 2.3 ns here, against 0.5 ns):
// x = n ln2 + r with |r| <= ln2 / 2, e^r by Cephes' degree-6 polynomial, 2^n built in the exponent
// bits. Within 1.4 ulp of e^x over [-87, 0] (checked against exp in double at 290K points); 0 below
// -87 (float's normal range ends near -87.3); e^NaN = NaN. Positive x is outside its contract.
RINGGRAD_HOST_DEVICE inline float exp_nonpositive(float x) {
#ifdef __CUDA_ARCH__
  return ::expf(x);
#else
  constexpr float kLowest = -87.0f;
  const float xc = x < kLowest ? kLowest : x;
  const float n = ::nearbyintf(xc * 1.44269504088896341f);                    // log2(e)
  const float r = mul_add(n, 2.12194440e-4f, mul_add(n, -0.693359375f, xc));  // ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = mul_add(p, r, 1.3981999507e-3f);
  p = mul_add(p, r, 8.3334519073e-3f);
  p = mul_add(p, r, 4.1665795894e-2f);
  p = mul_add(p, r, 1.6666665459e-1f);
  p = mul_add(p, r, 5.0000001201e-1f);
  p = mul_add(p, r * r, r + 1.0f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) * (1 << 23);
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const float y = x < kLowest ? 0.0f : p * scale;
  return x != x ? x : y;
#endif
}
RINGGRAD_HOST_DEVICE inline double exp_nonpositive(double x) { return ::exp(x); }  // float64 keeps libm's accuracy
RINGGRAD_HOST_DEVICE inline float pow(float x, float y) { return ::powf(x, y); }
RINGGRAD_HOST_DEVICE inline double pow(double x, double y) { return ::pow(x, y); }
}  // namespace math

constexpr double kSqrt2OverPi = 0.79788456080286535587989211986876;  ///< sqrt(2/pi)
constexpr double kInvSqrt2 = 0.70710678118654752440084436210485;     ///< 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267793994605993438;   ///< 1/sqrt(2 pi)
constexpr double kGeluCubic = 0.044715;

// The functors keep their one-line functions, so the table reads as a table.
// clang-format off
// -x,  d/dx = -1.
struct Neg {
  static constexpr Saved saved = Saved::None;
  static constexpr const char* name = "neg";
  static constexpr const char* backward_name = "NegBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T /*alpha*/) { return -x; }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T /*saved*/, T dy, T /*alpha*/) { return -dy; }
};

/// e^x,  d/dx = e^x = y.
struct Exp {
  static constexpr Saved saved = Saved::Y;
  static constexpr const char* name = "exp";
  static constexpr const char* backward_name = "ExpBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T /*alpha*/) { return math::exp(x); }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T y, T dy, T /*alpha*/) { return dy * y; }
};

/// ln x,  d/dx = 1/x.
struct Log {
  static constexpr Saved saved = Saved::X;
  static constexpr const char* name = "log";
  static constexpr const char* backward_name = "LogBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T /*alpha*/) { return math::log(x); }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T x, T dy, T /*alpha*/) { return dy / x; }
};

/// sqrt x,  d/dx = 1/(2 sqrt x) = 1/(2y).
struct Sqrt {
  static constexpr Saved saved = Saved::Y;
  static constexpr const char* name = "sqrt";
  static constexpr const char* backward_name = "SqrtBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T /*alpha*/) { return math::sqrt(x); }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T y, T dy, T /*alpha*/) { return dy / (T(2) * y); }
};

/// max(x, 0),  d/dx = [y > 0] (0 at the kink, as PyTorch).
struct Relu {
  static constexpr Saved saved = Saved::Y;
  static constexpr const char* name = "relu";
  static constexpr const char* backward_name = "ReluBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T /*alpha*/) { return x > T(0) ? x : T(0); }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T y, T dy, T /*alpha*/) {
    return y > T(0) ? dy : T(0);
  }
};

/// GELU, tanh approximation: x/2 (1 + t),  t = tanh(u),  u = sqrt(2/pi) (x + 0.044715 x^3);
/// d/dx = (1 + t)/2 + x/2 (1 - t^2) du/dx,  du/dx = sqrt(2/pi) (1 + 3*0.044715 x^2).
struct GeluTanh {
  static constexpr Saved saved = Saved::X;
  static constexpr const char* name = "gelu";
  static constexpr const char* backward_name = "GeluBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T /*alpha*/) {
    const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
    return T(0.5) * x * (T(1) + math::tanh(u));
  }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T x, T dy, T /*alpha*/) {
    const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
    const T t = math::tanh(u);
    const T du_dx = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
    return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du_dx);
  }
};

/// Exact GELU: x Phi(x) = x/2 (1 + erf(x/sqrt 2)), Phi the standard normal CDF;
/// d/dx = Phi(x) + x phi(x),  phi(x) = e^(-x^2/2) / sqrt(2 pi).
struct GeluErf {
  static constexpr Saved saved = Saved::X;
  static constexpr const char* name = "gelu";
  static constexpr const char* backward_name = "GeluBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T /*alpha*/) {
    return T(0.5) * x * (T(1) + math::erf(x * T(kInvSqrt2)));
  }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T x, T dy, T /*alpha*/) {
    const T cdf = T(0.5) * (T(1) + math::erf(x * T(kInvSqrt2)));
    const T pdf = T(kInvSqrt2Pi) * math::exp_nonpositive(T(-0.5) * x * x);
    return dy * (cdf + x * pdf);
  }
};

/// tanh x,  d/dx = 1 - y^2: the backward needs only y.
struct Tanh {
  static constexpr Saved saved = Saved::Y;
  static constexpr const char* name = "tanh";
  static constexpr const char* backward_name = "TanhBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T /*alpha*/) { return math::tanh(x); }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T y, T dy, T /*alpha*/) {
    return dy * (T(1) - y * y);
  }
};

/// 1/(1 + e^-x),  d/dx = y (1 - y). For very negative x, e^-x overflows to inf and y is the correct 0.
struct Sigmoid {
  static constexpr Saved saved = Saved::Y;
  static constexpr const char* name = "sigmoid";
  static constexpr const char* backward_name = "SigmoidBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T /*alpha*/) {
    return T(1) / (T(1) + math::exp(-x));
  }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T y, T dy, T /*alpha*/) {
    return dy * y * (T(1) - y);
  }
};

/// x + alpha,  d/dx = 1.
struct AddScalar {
  static constexpr Saved saved = Saved::None;
  static constexpr const char* name = "add";
  static constexpr const char* backward_name = "AddScalarBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T alpha) { return x + alpha; }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T /*saved*/, T dy, T /*alpha*/) { return dy; }
};

/// x * alpha,  d/dx = alpha.
struct MulScalar {
  static constexpr Saved saved = Saved::None;
  static constexpr const char* name = "mul";
  static constexpr const char* backward_name = "MulScalarBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T alpha) { return x * alpha; }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T /*saved*/, T dy, T alpha) { return dy * alpha; }
};

/// alpha / x,  d/dx = -alpha / x^2.
struct RDivScalar {
  static constexpr Saved saved = Saved::X;
  static constexpr const char* name = "div";
  static constexpr const char* backward_name = "RDivScalarBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T alpha) { return alpha / x; }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T x, T dy, T alpha) { return -dy * alpha / (x * x); }
};

/// x^alpha,  d/dx = alpha x^(alpha - 1).
struct PowScalar {
  static constexpr Saved saved = Saved::X;
  static constexpr const char* name = "pow";
  static constexpr const char* backward_name = "PowBackward";
  /// Squaring (MSE) is common enough to skip pow()'s general path; x*x is what pow(x, 2) rounds to.
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T alpha) {
    return alpha == T(2) ? x * x : math::pow(x, alpha);
  }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T x, T dy, T alpha) {
    // x^0 is constant: its derivative is 0 everywhere, even at x = 0 where 0 * x^-1 would be NaN.
    if (alpha == T(0)) return T(0);
    if (alpha == T(2)) return T(2) * x * dy;
    return dy * alpha * math::pow(x, alpha - T(1));
  }
};

// [silu]
// SiLU (swish): x s,  s = sigmoid(x) = 1/(1 + e^-x);  d/dx = s + x s (1 - s) = s (1 + x (1 - s)).
// Saves x: recovering s from y = x s would divide by x, which fails at 0.
struct Silu {
  static constexpr Saved saved = Saved::X;
  static constexpr const char* name = "silu";
  static constexpr const char* backward_name = "SiluBackward";
  template <typename T> RINGGRAD_HOST_DEVICE static T forward(T x, T /*alpha*/) {
    return x * (T(1) / (T(1) + math::exp(-x)));
  }
  template <typename T> RINGGRAD_HOST_DEVICE static T backward(T x, T dy, T /*alpha*/) {
    const T s = T(1) / (T(1) + math::exp(-x));
    return dy * (s * (T(1) + x * (T(1) - s)));
  }
};
// [/silu]

// clang-format on

}  // namespace unary_ops

/// f(unary_ops::Name{}) for the functor of `op`: the one switch over UnaryOp. Called with a generic
/// lambda, it instantiates the lambda once per op, so a loop written inside it is one loop per op with
/// the functor inlined. Every branch must return the same type.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable  // f may be a __device__ lambda: only its device instantiation is used
#endif
template <typename F>
RINGGRAD_HOST_DEVICE inline decltype(auto) visit_unary(UnaryOp op, F&& f) {
  switch (op) {
#define RINGGRAD_UNARY_CASE(Name) \
  case UnaryOp::Name: return f(unary_ops::Name{});
    RINGGRAD_UNARY_OPS(RINGGRAD_UNARY_CASE)
#undef RINGGRAD_UNARY_CASE
  }
  return f(unary_ops::Neg{});  // not reached: every UnaryOp has a case above
}

/// What the backward of `op` reads, and its names (the functor's fields, reached from a runtime op).
RINGGRAD_HOST_DEVICE inline unary_ops::Saved unary_saved(UnaryOp op) {
  return visit_unary(op, [](auto f) { return decltype(f)::saved; });
}
/// The op's name ("tanh"), for messages.
inline const char* unary_name(UnaryOp op) {
  return visit_unary(op, [](auto f) { return decltype(f)::name; });
}
/// The name of the op's backward node ("TanhBackward").
inline const char* unary_backward_name(UnaryOp op) {
  return visit_unary(op, [](auto f) { return decltype(f)::backward_name; });
}

}  // namespace kernels
}  // namespace ringgrad
