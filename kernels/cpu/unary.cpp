// kernels/cpu/unary.cpp: elementwise y = f(x) and its backward dx = dy * f'(saved), on dense arrays.
//
// Budget: forward reads n and writes n elements (8 B each way per float); backward reads two arrays
// and writes one. The arithmetic ops (neg, relu, scalar add/mul) are memory-bound and vectorised;
// the transcendental ones (exp, tanh, erf) call libm per element and are bound by it instead.
// The formulas are the functors of kernels/unary_ops.h. visit_unary picks the functor outside the
// loop, so each op gets its own loop with the functor's body inlined.
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"
#include <ringgrad/kernels/unary_ops.h>

namespace ringgrad {
namespace kernels {
namespace {

template <typename F, typename T>
void unary_loop(const T* x, T* y, int64_t n, T alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] = F::forward(x[i], alpha);
}

// The ops that save nothing get no `saved` pointer (it may be null) and never read one.
template <typename F, typename T>
void unary_backward_loop(const T* saved, const T* dy, T* dx, int64_t n, T alpha) {
  if constexpr (F::saved == unary_ops::Saved::None) {
    for (int64_t i = 0; i < n; ++i) dx[i] = F::backward(T(0), dy[i], alpha);
  } else {
    for (int64_t i = 0; i < n; ++i) dx[i] = F::backward(saved[i], dy[i], alpha);
  }
}

}  // namespace

void CpuBackend::unary(UnaryOp op, DType dt, const void* x, void* y, int64_t n, double alpha, Stream) {
  cpu::dispatch_floating("unary", dt, [&](auto zero) {
    using T = decltype(zero);
    visit_unary(op, [&](auto f) {
      unary_loop<decltype(f)>(static_cast<const T*>(x), static_cast<T*>(y), n, static_cast<T>(alpha));
    });
  });
}

void CpuBackend::unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n,
                                double alpha, Stream) {
  cpu::dispatch_floating("unary_backward", dt, [&](auto zero) {
    using T = decltype(zero);
    visit_unary(op, [&](auto f) {
      unary_backward_loop<decltype(f)>(static_cast<const T*>(saved), static_cast<const T*>(dy), static_cast<T*>(dx), n,
                                       static_cast<T>(alpha));
    });
  });
}

}  // namespace kernels
}  // namespace ringgrad
