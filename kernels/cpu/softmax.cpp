// kernels/cpu/softmax.cpp: softmax and log_softmax over the middle axis of a dense [outer, c, inner]
// array, forward and backward, and cross-entropy on rows of logits against integer labels.
//
// Stability: softmax(x) = softmax(x - max x). Subtracting the maximum first makes every exponent
// <= 0, so e^(x - max) never overflows and the largest term is exactly 1 (the sum is >= 1, and its
// log is safe). log_softmax is computed as x - (max + log sum), never as log(softmax), which would
// underflow to log(0) = -inf for very unlikely classes.
//
// Budget: forward reads x twice (max pass, exp pass) and writes y once, with one exp per element:
// bound by exp's throughput on a CPU, not by memory. Sums accumulate in double.
//
// Layout: as in reduce.cpp, columns are processed in tiles of up to kTile (the inner index), each
// tile's running max and sum kept in stack arrays, so inner loops are unit-stride. For the common
// inner == 1 case (softmax over the last dimension) the forward has its own row loop instead, whose
// float32 exponentials are a vectorised polynomial (exp_nonpositive) rather than libm's expf.
//
// Threads: tiles (and cross-entropy's rows) are independent, so they are dealt out in contiguous
// ranges, up to four a thread (thread_pool.h), once a part gets kExpGrain elements: exp costs several
// times a memory-bound add per element, so a split pays for fewer of them than kGrain. A tile is
// always computed whole by one thread, so the results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/thread_pool.h"
#include <ringgrad/kernels/unary_ops.h>

namespace ringgrad {
namespace kernels {
namespace {

constexpr int64_t kTile = 256;
constexpr int64_t kExpGrain = cpu::kGrain / 8;  // elements a part gets at least, for the loops with exp

// Calls tile(base, width) for each tile: elements (j, t) of the tile sit at
// base + j * inner + t for j < c, t < width, where base = o * c * inner + i0. Tiles are spread
// over threads; `grain` is the least number of elements a part is given.
template <typename Tile>
void for_each_tile(int64_t outer, int64_t c, int64_t inner, int64_t grain, Tile&& tile) {
  const int64_t tiles_per_row = (inner + kTile - 1) / kTile;
  const int64_t tile_elements = std::max<int64_t>(1, c * std::min(inner, kTile));
  cpu::parallel_range(outer * tiles_per_row, std::max<int64_t>(1, grain / tile_elements),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t k = begin; k < end; ++k) {
                          const int64_t o = k / tiles_per_row, i0 = k % tiles_per_row * kTile;
                          tile(o * c * inner + i0, std::min(kTile, inner - i0));
                        }
                      });
}

// Calls body(r0, r1) on ranges of rows, `c` elements each, spread over threads.
template <typename Body>
void for_row_ranges(int64_t rows, int64_t c, int64_t grain, Body&& body) {
  cpu::parallel_range(rows, std::max<int64_t>(1, grain / std::max<int64_t>(c, 1)), body);
}

// float32's exponentials are unary_ops.h's vectorised polynomial; float64 keeps libm's accuracy.
using unary_ops::math::exp_nonpositive;

// Softmax over one contiguous row of c elements (inner == 1): max, exponentials and their sum in
// eight independent lanes each, so every loop vectorises.
template <typename T>
void softmax_row(const T* x, T* y, int64_t c, bool log) {
  T lane_max[8];
  for (T& m : lane_max) m = -std::numeric_limits<T>::infinity();
  int64_t j = 0;
  for (; j + 8 <= c; j += 8)
    for (int l = 0; l < 8; ++l) lane_max[l] = std::max(lane_max[l], x[j + l]);
  for (; j < c; ++j) lane_max[0] = std::max(lane_max[0], x[j]);
  T max = lane_max[0];
  for (int l = 1; l < 8; ++l) max = std::max(max, lane_max[l]);

  double lane_sum[8] = {};
  for (j = 0; j + 8 <= c; j += 8) {
    for (int l = 0; l < 8; ++l) {
      const T e = exp_nonpositive(x[j + l] - max);
      if (!log) y[j + l] = e;  // normalised below, once the sum is known
      lane_sum[l] += static_cast<double>(e);
    }
  }
  for (; j < c; ++j) {
    const T e = exp_nonpositive(x[j] - max);
    if (!log) y[j] = e;
    lane_sum[0] += static_cast<double>(e);
  }
  const double sum = ((lane_sum[0] + lane_sum[1]) + (lane_sum[2] + lane_sum[3])) +
                     ((lane_sum[4] + lane_sum[5]) + (lane_sum[6] + lane_sum[7]));
  if (log) {
    const T log_sum_exp = max + static_cast<T>(std::log(sum));
    for (j = 0; j < c; ++j) y[j] = x[j] - log_sum_exp;
  } else {
    const T inv_sum = static_cast<T>(1.0 / sum);
    for (j = 0; j < c; ++j) y[j] *= inv_sum;
  }
}

template <typename T>
void softmax_forward(const T* x, T* y, int64_t outer, int64_t c, int64_t inner, bool log) {
  if (inner == 1) {
    for_row_ranges(outer, c, kExpGrain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) softmax_row(x + r * c, y + r * c, c, log);
    });
    return;
  }
  for_each_tile(outer, c, inner, kExpGrain, [&](int64_t base, int64_t width) {
    const T* xt = x + base;
    T* yt = y + base;
    T max[kTile];
    double sum[kTile];
    for (int64_t t = 0; t < width; ++t) {
      max[t] = -std::numeric_limits<T>::infinity();
      sum[t] = 0.0;
    }
    for (int64_t j = 0; j < c; ++j)
      for (int64_t t = 0; t < width; ++t) max[t] = std::max(max[t], xt[j * inner + t]);
    if (log) {
      for (int64_t j = 0; j < c; ++j)
        for (int64_t t = 0; t < width; ++t) sum[t] += static_cast<double>(std::exp(xt[j * inner + t] - max[t]));
      T log_sum_exp[kTile];
      for (int64_t t = 0; t < width; ++t) log_sum_exp[t] = max[t] + static_cast<T>(std::log(sum[t]));
      for (int64_t j = 0; j < c; ++j)
        for (int64_t t = 0; t < width; ++t) yt[j * inner + t] = xt[j * inner + t] - log_sum_exp[t];
    } else {
      for (int64_t j = 0; j < c; ++j) {
        for (int64_t t = 0; t < width; ++t) {
          const T e = std::exp(xt[j * inner + t] - max[t]);
          yt[j * inner + t] = e;  // normalised below, once the sum is known
          sum[t] += static_cast<double>(e);
        }
      }
      T inv_sum[kTile];
      for (int64_t t = 0; t < width; ++t) inv_sum[t] = static_cast<T>(1.0 / sum[t]);
      for (int64_t j = 0; j < c; ++j)
        for (int64_t t = 0; t < width; ++t) yt[j * inner + t] *= inv_sum[t];
    }
  });
}

// softmax:      dx = y (dy - sum_j dy_j y_j)   (the Jacobian diag(y) - y y^T applied to dy)
// log_softmax:  dx = dy - e^y sum_j dy_j       (e^y is the softmax, recovered from the saved y)
template <typename T>
void softmax_backward_typed(const T* y, const T* dy, T* dx, int64_t outer, int64_t c, int64_t inner, bool log) {
  for_each_tile(outer, c, inner, log ? kExpGrain : cpu::kGrain, [&](int64_t base, int64_t width) {
    const T* yt = y + base;
    const T* dyt = dy + base;
    T* dxt = dx + base;
    double acc[kTile];  // only the first `width` entries are used, so only they are zeroed
    for (int64_t t = 0; t < width; ++t) acc[t] = 0.0;
    T total[kTile];
    if (log) {
      for (int64_t j = 0; j < c; ++j)
        for (int64_t t = 0; t < width; ++t) acc[t] += static_cast<double>(dyt[j * inner + t]);
      for (int64_t t = 0; t < width; ++t) total[t] = static_cast<T>(acc[t]);
      for (int64_t j = 0; j < c; ++j)
        for (int64_t t = 0; t < width; ++t)
          dxt[j * inner + t] = dyt[j * inner + t] - std::exp(yt[j * inner + t]) * total[t];
    } else {
      for (int64_t j = 0; j < c; ++j)
        for (int64_t t = 0; t < width; ++t)
          acc[t] += static_cast<double>(dyt[j * inner + t]) * static_cast<double>(yt[j * inner + t]);
      for (int64_t t = 0; t < width; ++t) total[t] = static_cast<T>(acc[t]);
      for (int64_t j = 0; j < c; ++j)
        for (int64_t t = 0; t < width; ++t) dxt[j * inner + t] = yt[j * inner + t] * (dyt[j * inner + t] - total[t]);
    }
  });
}

void check_label(const char* kernel, int64_t label, int64_t row, int64_t c) {
  RINGGRAD_CHECK(label >= 0 && label < c, kernel, ": expected labels in [0, ", c, "), got ", label, " in row ", row);
}

// loss_r = logsumexp(x_r) - (1 - eps) x_r[label] - eps mean(x_r): the cross-entropy against the
// smoothed target (1 - eps) onehot(label) + eps/c, since the target sums to 1 and
// -sum_j target_j log softmax(x)_j = logsumexp(x) - sum_j target_j x_j.
template <typename T>
void cross_entropy_row(const T* logits, const int64_t* labels, T* loss, T* probs, int64_t r, int64_t c, double eps) {
  const T* x = logits + r * c;
  check_label("cross_entropy", labels[r], r, c);
  T max = -std::numeric_limits<T>::infinity();
  double sum_x = 0.0;
  for (int64_t j = 0; j < c; ++j) {
    max = std::max(max, x[j]);
    sum_x += static_cast<double>(x[j]);
  }
  double sum_exp = 0.0;
  if (probs != nullptr) {
    T* p = probs + r * c;
    for (int64_t j = 0; j < c; ++j) {
      p[j] = std::exp(x[j] - max);
      sum_exp += static_cast<double>(p[j]);
    }
    const T inv_sum = static_cast<T>(1.0 / sum_exp);
    for (int64_t j = 0; j < c; ++j) p[j] *= inv_sum;
  } else {
    for (int64_t j = 0; j < c; ++j) sum_exp += static_cast<double>(std::exp(x[j] - max));
  }
  const double log_sum_exp = static_cast<double>(max) + std::log(sum_exp);
  const double target_dot_x = (1.0 - eps) * static_cast<double>(x[labels[r]]) + eps * sum_x / static_cast<double>(c);
  loss[r] = static_cast<T>(log_sum_exp - target_dot_x);
}

template <typename T>
void cross_entropy_forward_typed(const T* logits, const int64_t* labels, T* loss, T* probs, int64_t rows, int64_t c,
                                 double eps) {
  for_row_ranges(rows, c, kExpGrain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) cross_entropy_row(logits, labels, loss, probs, r, c, eps);
  });
}

// dlogits_r = scale * dloss_r * (softmax(x_r) - target_r): the familiar "probabilities minus target".
template <typename T>
void cross_entropy_backward_typed(const T* probs, const int64_t* labels, const T* dloss, int64_t dloss_stride,
                                  double scale, T* dlogits, int64_t rows, int64_t c, double eps) {
  const T off_target = static_cast<T>(eps / static_cast<double>(c));
  for_row_ranges(rows, c, cpu::kGrain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      check_label("cross_entropy_backward", labels[r], r, c);
      const T g = static_cast<T>(scale * static_cast<double>(dloss[r * dloss_stride]));
      const T* p = probs + r * c;
      T* d = dlogits + r * c;
      for (int64_t j = 0; j < c; ++j) d[j] = g * (p[j] - off_target);
      d[labels[r]] -= g * static_cast<T>(1.0 - eps);
    }
  });
}

}  // namespace

void CpuBackend::softmax(DType dt, const void* x, void* y, int64_t outer, int64_t c, int64_t inner, bool log, Stream) {
  cpu::dispatch_floating(log ? "log_softmax" : "softmax", dt, [&](auto zero) {
    using T = decltype(zero);
    softmax_forward(static_cast<const T*>(x), static_cast<T*>(y), outer, c, inner, log);
  });
}

void CpuBackend::softmax_backward(DType dt, const void* y, const void* dy, void* dx, int64_t outer, int64_t c,
                                  int64_t inner, bool log, Stream) {
  cpu::dispatch_floating(log ? "log_softmax_backward" : "softmax_backward", dt, [&](auto zero) {
    using T = decltype(zero);
    softmax_backward_typed(static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), outer, c, inner,
                           log);
  });
}

void CpuBackend::cross_entropy_forward(DType dt, const void* logits, const int64_t* labels, void* loss, void* probs,
                                       int64_t rows, int64_t c, double label_smoothing, Stream) {
  cpu::dispatch_floating("cross_entropy", dt, [&](auto zero) {
    using T = decltype(zero);
    cross_entropy_forward_typed(static_cast<const T*>(logits), labels, static_cast<T*>(loss), static_cast<T*>(probs),
                                rows, c, label_smoothing);
  });
}

void CpuBackend::cross_entropy_backward(DType dt, const void* probs, const int64_t* labels, const void* dloss,
                                        int64_t dloss_stride, double scale, void* dlogits, int64_t rows, int64_t c,
                                        double label_smoothing, Stream) {
  cpu::dispatch_floating("cross_entropy_backward", dt, [&](auto zero) {
    using T = decltype(zero);
    cross_entropy_backward_typed(static_cast<const T*>(probs), labels, static_cast<const T*>(dloss), dloss_stride,
                                 scale, static_cast<T*>(dlogits), rows, c, label_smoothing);
  });
}

}  // namespace kernels
}  // namespace ringgrad
