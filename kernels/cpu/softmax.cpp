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
// inner == 1 case (softmax over the last dimension) a tile is one column, i.e. one row of x.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"

namespace ringgrad {
namespace kernels {
namespace {

constexpr int64_t kTile = 256;

// Calls tile(base, width) for each tile: elements (j, t) of the tile sit at
// base + j * inner + t for j < c, t < width, where base = o * c * inner + i0.
template <typename Tile>
void for_each_tile(int64_t outer, int64_t c, int64_t inner, Tile&& tile) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i0 = 0; i0 < inner; i0 += kTile) tile(o * c * inner + i0, inner - i0 < kTile ? inner - i0 : kTile);
}

template <typename T>
void softmax_forward(const T* x, T* y, int64_t outer, int64_t c, int64_t inner, bool log) {
  for_each_tile(outer, c, inner, [&](int64_t base, int64_t width) {
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
  for_each_tile(outer, c, inner, [&](int64_t base, int64_t width) {
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
void cross_entropy_forward_typed(const T* logits, const int64_t* labels, T* loss, T* probs, int64_t rows, int64_t c,
                                 double eps) {
  for (int64_t r = 0; r < rows; ++r) {
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
}

// dlogits_r = scale * dloss_r * (softmax(x_r) - target_r): the familiar "probabilities minus target".
template <typename T>
void cross_entropy_backward_typed(const T* probs, const int64_t* labels, const T* dloss, int64_t dloss_stride,
                                  double scale, T* dlogits, int64_t rows, int64_t c, double eps) {
  const T off_target = static_cast<T>(eps / static_cast<double>(c));
  for (int64_t r = 0; r < rows; ++r) {
    check_label("cross_entropy_backward", labels[r], r, c);
    const T g = static_cast<T>(scale * static_cast<double>(dloss[r * dloss_stride]));
    const T* p = probs + r * c;
    T* d = dlogits + r * c;
    for (int64_t j = 0; j < c; ++j) d[j] = g * (p[j] - off_target);
    d[labels[r]] -= g * static_cast<T>(1.0 - eps);
  }
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
