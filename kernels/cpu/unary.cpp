// kernels/cpu/unary.cpp: elementwise y = f(x) and its backward dx = dy * f'(saved), on dense arrays.
//
// Budget: forward reads n and writes n elements (8 B each way per float); backward reads two arrays
// and writes one. The arithmetic ops (neg, relu, scalar add/mul) are memory-bound and vectorised;
// the transcendental ones (exp, tanh, erf) call libm per element and are bound by it instead.
// The formulas are the functors of kernels/unary_ops.h. visit_unary picks the functor outside the
// loop, so each op gets its own loop with the functor's body inlined.
//
// Threads: each call is cut into contiguous ranges, up to four a thread (thread_pool.h), once each part
// gets its grain: kGrain elements for the arithmetic ops, kGrain / 8 for the libm-bound ones, which
// take far longer per element (tanh: 14 ns against relu's 0.12 ns an element at 32K, one thread,
// on the busy machine of thread_pool.h's measurement), so the same wake-up cost is repaid by fewer
// elements: two threads paid for tanh from 8-16K elements. Each element's value does not depend on
// the split.
#include <type_traits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/thread_pool.h"
#include <ringgrad/kernels/unary_ops.h>

namespace ringgrad {
namespace kernels {
namespace {

// The ops that are a few arithmetic instructions per element, vectorised; the rest call libm.
template <typename F>
constexpr bool is_arithmetic_op() {
  using namespace unary_ops;  // NOLINT(google-build-using-namespace): the functor names only
  return std::is_same_v<F, Neg> || std::is_same_v<F, Relu> || std::is_same_v<F, Sqrt> || std::is_same_v<F, AddScalar> ||
         std::is_same_v<F, MulScalar> || std::is_same_v<F, RDivScalar>;
}

template <typename F>
constexpr int64_t unary_grain() {
  return is_arithmetic_op<F>() ? cpu::kGrain : cpu::kGrain / 8;
}

// noinline: inlined into parallel_range's lambda, which holds the pointers by reference, GCC could
// no longer tell that a store to y[i] leaves those pointers alone, and the loop stopped vectorising:
// relu over 16K floats went from 2.1 to 3.6 us, on one thread. A call takes them by value.
template <typename F, typename T>
__attribute__((noinline)) void unary_loop(const T* x, T* y, int64_t n, T alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] = F::forward(x[i], alpha);
}

// The ops that save nothing get no `saved` pointer (it may be null) and never read one.
template <typename F, typename T>
__attribute__((noinline)) void unary_backward_loop(const T* saved, const T* dy, T* dx, int64_t n, T alpha) {
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
      using F = decltype(f);
      const T* xs = static_cast<const T*>(x);
      T* ys = static_cast<T*>(y);
      cpu::parallel_range(n, unary_grain<F>(), [&](int64_t begin, int64_t end) {
        unary_loop<F>(xs + begin, ys + begin, end - begin, static_cast<T>(alpha));
      });
    });
  });
}

void CpuBackend::unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n,
                                double alpha, Stream) {
  cpu::dispatch_floating("unary_backward", dt, [&](auto zero) {
    using T = decltype(zero);
    visit_unary(op, [&](auto f) {
      using F = decltype(f);
      const T* s = static_cast<const T*>(saved);  // may be null: then F saves nothing and it is never read
      const T* g = static_cast<const T*>(dy);
      T* d = static_cast<T*>(dx);
      cpu::parallel_range(n, unary_grain<F>(), [&](int64_t begin, int64_t end) {
        unary_backward_loop<F>(s ? s + begin : s, g + begin, d + begin, end - begin, static_cast<T>(alpha));
      });
    });
  });
}

}  // namespace kernels
}  // namespace ringgrad
