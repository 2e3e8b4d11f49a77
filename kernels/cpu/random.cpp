// kernels/cpu/random.cpp: random draws (uniform, normal) and dropout, both on Philox counters.
//
// Element i always uses counter offset + i under the draw's seed (core/base/philox.h), so a tensor
// drawn here equals the same tensor drawn in pieces, on another thread, or on a GPU.
// Cost: one Philox block per element (7-10 ns of integer multiplies on one core; a normal adds
// logf and cosf), far more than moving the 4-8 bytes written: on a CPU these kernels are
// compute-bound, and 1M-element dropout takes several milliseconds.
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"
#include <ringgrad/core/base/philox.h>

namespace ringgrad {
namespace kernels {

void CpuBackend::random(RandomKind kind, DType dt, void* dst, int64_t n, uint64_t seed, uint64_t offset, double a,
                        double b, Stream) {
  cpu::dispatch_floating("random", dt, [&](auto zero) {
    using T = decltype(zero);
    T* out = static_cast<T*>(dst);
    const T lo = static_cast<T>(a);
    if (kind == RandomKind::Uniform) {
      const T hi = static_cast<T>(b), width = static_cast<T>(b - a);
      // lo + width*u can round up to hi itself when u is just below 1; the interval is half-open,
      // so such a value is moved down to the largest number below hi.
      const T below_hi = std::nextafter(hi, lo);
      for (int64_t i = 0; i < n; ++i) {
        const T v = lo + width * philox::uniform<T>(seed, offset + static_cast<uint64_t>(i));
        out[i] = (v < hi) ? v : below_hi;
      }
    } else {
      const T std_dev = static_cast<T>(b);
      for (int64_t i = 0; i < n; ++i)
        out[i] = lo + std_dev * philox::normal<T>(seed, offset + static_cast<uint64_t>(i));
    }
  });
}

// y = x * mask, mask = keep / (1 - p): scaling the kept elements by 1/(1-p) keeps E[y] = x, so the
// network needs no rescaling at evaluation time (inverted dropout, as in PyTorch).
void CpuBackend::dropout(DType dt, const void* x, void* y, void* mask, int64_t n, double p, uint64_t seed,
                         uint64_t offset, Stream) {
  RINGGRAD_CHECK(p >= 0.0 && p <= 1.0, "dropout: expected a probability p in [0, 1], got ", p);
  cpu::dispatch_floating("dropout", dt, [&](auto zero) {
    using T = decltype(zero);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    T* ms = static_cast<T*>(mask);
    // p == 1 drops everything; 1/(1-p) would be infinite and 0*inf a NaN.
    const T scale = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    const T p_t = static_cast<T>(p);
    for (int64_t i = 0; i < n; ++i) {
      const T keep = philox::uniform<T>(seed, offset + static_cast<uint64_t>(i)) >= p_t ? scale : T(0);
      ms[i] = keep;
      ys[i] = xs[i] * keep;
    }
  });
}

}  // namespace kernels
}  // namespace ringgrad
