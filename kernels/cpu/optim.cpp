// kernels/cpu/optim.cpp: fused SGD and Adam/AdamW updates of one dense parameter, in place.
//
// Budget per element (b = 4 B for float32, 8 B for float64):
//   SGD, no momentum      reads p, g; writes p                   3b  (12 B)   2 FLOPs (4 with weight decay)
//   SGD, momentum         reads p, g, buf; writes p, buf         5b  (20 B)   about 6 FLOPs
//                         (first step: buf is written, not read: 4b)
//   Adam/AdamW            reads p, g, m, v; writes p, m, v       7b  (28 B)   about 12 FLOPs + sqrt + div
// Well under 1 FLOP/byte: memory-bound, so one pass over memory is the whole point of fusing; the
// unfused sequence of PyTorch-style tensor ops would read and write each array several times.
//
// The arithmetic follows PyTorch 1.13's single-tensor (for-loop) implementation operation by
// operation: scalar factors are formed in double, as Python does, then rounded to the parameter's
// dtype, and each line below names the PyTorch call it mirrors. Results agree with PyTorch to
// rounding (PyTorch's vectorised add uses fused multiply-adds where the CPU has them).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/thread_pool.h"

namespace ringgrad {
namespace kernels {
namespace {

// One loop per combination of flags, each flag a compile-time constant: the compiler then sees a
// branch-free body and vectorises it. (With the flags as runtime tests, GCC could not vectorise the
// conditional read of buf and ran this loop one element at a time, 2.3x slower.)
template <typename T, bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_loop(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n, const SgdStepArgs& a) {
  const T weight_decay = T(a.weight_decay);
  const T momentum = T(a.momentum);
  const T one_minus_dampening = T(1.0 - a.dampening);
  const T minus_lr = T(-a.lr);
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if (kDecay) d = d + weight_decay * p[i];  // d_p = d_p.add(param, alpha=weight_decay)
    if (kMomentum) {
      // buf = clone(d_p) on the first step, else buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
      const T b = kFirst ? d : buf[i] * momentum + one_minus_dampening * d;
      buf[i] = b;
      d = kNesterov ? d + momentum * b : b;  // d_p = d_p.add(buf, alpha=momentum) or d_p = buf
    }
    p[i] = p[i] + minus_lr * d;  // param.add_(d_p, alpha=-lr)
  }
}

template <typename T>
void sgd_step_typed(T* p, const T* g, T* buf, int64_t n, const SgdStepArgs& a) {
  const bool decay = a.weight_decay != 0.0;
  // Turns the four runtime flags into template arguments, one at a time.
  auto with = [&](auto d, auto m, auto f, auto v) {
    sgd_loop<T, decltype(d)::value, decltype(m)::value, decltype(f)::value, decltype(v)::value>(p, g, buf, n, a);
  };
  using Y = std::true_type;
  using N = std::false_type;
  auto pick_nesterov = [&](auto d, auto m, auto f) { a.nesterov ? with(d, m, f, Y{}) : with(d, m, f, N{}); };
  auto pick_first = [&](auto d, auto m) { a.first_step ? pick_nesterov(d, m, Y{}) : pick_nesterov(d, m, N{}); };
  auto pick_momentum = [&](auto d) { buf ? pick_first(d, Y{}) : with(d, N{}, N{}, N{}); };
  decay ? pick_momentum(Y{}) : pick_momentum(N{});
}

template <typename T>
void adam_step_typed(T* p, const T* g, T* m, T* v, int64_t n, const AdamStepArgs& a) {
  const auto t = static_cast<double>(a.step);
  const double bias_correction1 = 1.0 - std::pow(a.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(a.beta2, t);
  const T decay = T(1.0 - a.lr * a.weight_decay);  // AdamW's factor
  const T weight_decay = T(a.weight_decay);
  const bool coupled_decay = !a.decoupled_weight_decay && a.weight_decay != 0.0;
  const T beta1 = T(a.beta1), one_minus_beta1 = T(1.0 - a.beta1);
  const T beta2 = T(a.beta2), one_minus_beta2 = T(1.0 - a.beta2);
  const T bias_correction2_sqrt = T(std::sqrt(bias_correction2));
  const T eps = T(a.eps);
  const T minus_step_size = T(-(a.lr / bias_correction1));
  for (int64_t i = 0; i < n; ++i) {
    T pi = p[i];
    T gi = g[i];
    if (a.decoupled_weight_decay) pi = pi * decay;     // param.mul_(1 - lr * weight_decay)
    if (coupled_decay) gi = gi + weight_decay * pi;    // grad = grad.add(param, alpha=weight_decay)
    const T mi = m[i] * beta1 + one_minus_beta1 * gi;  // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    const T vi =
        v[i] * beta2 + one_minus_beta2 * gi * gi;  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    m[i] = mi;
    v[i] = vi;
    const T denom = std::sqrt(vi) / bias_correction2_sqrt + eps;  // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    p[i] = pi + minus_step_size * mi / denom;                     // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

}  // namespace

// Large parameters are updated in ranges on several threads: each element's update is independent,
// so the split cannot change a result. Ranges are whole multiples of 64 elements so no two threads
// share a cache line; a part gets at least kGrain elements (thread_pool.h; the updates read and
// write more bytes per element than an add, so the same grain is on the safe side).
constexpr int64_t kLine = 64;

template <typename F>
void in_chunks(int64_t n, F&& update) {
  cpu::parallel_range((n + kLine - 1) / kLine, cpu::kGrain / kLine, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * kLine, last = std::min(n, end * kLine);
    update(first, last - first);
  });
}

void CpuBackend::sgd_step(DType dt, void* param, const void* grad, void* momentum_buffer, int64_t n,
                          const SgdStepArgs& args, Stream) {
  cpu::dispatch_floating("sgd_step", dt, [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* buf = static_cast<T*>(momentum_buffer);
    in_chunks(n, [&](int64_t begin, int64_t count) {
      sgd_step_typed(p + begin, g + begin, buf ? buf + begin : nullptr, count, args);
    });
  });
}

void CpuBackend::adam_step(DType dt, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                           const AdamStepArgs& args, Stream) {
  cpu::dispatch_floating("adam_step", dt, [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* m = static_cast<T*>(exp_avg);
    T* v = static_cast<T*>(exp_avg_sq);
    in_chunks(n, [&](int64_t begin, int64_t count) {
      adam_step_typed(p + begin, g + begin, m + begin, v + begin, count, args);
    });
  });
}

}  // namespace kernels
}  // namespace ringgrad
