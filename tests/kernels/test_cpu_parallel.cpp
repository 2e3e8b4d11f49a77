// tests/kernels/test_cpu_parallel.cpp: the CPU kernels split across threads give the same bits as
// on one thread, and the right values, at sizes around the grain (thread_pool.h's kGrain).
//
// Each kernel runs with kernel_threads() = 1, 2 and 3 on the same inputs; the 2- and 3-thread
// outputs must equal the 1-thread output bit for bit, and that output must match a plain loop:
// exactly for elementwise ops and copies, within a tight tolerance for sums.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include <ringgrad/kernels/backend.h>
#include <ringgrad/kernels/unary_ops.h>

#include "kernels/cpu/thread_pool.h"

using namespace ringgrad;
using namespace ringgrad::kernels;

namespace {

Backend& host() { return backend_for(DeviceKind::CPU, "test"); }

constexpr int64_t G = cpu::kGrain;

// A float32 sum's documented error bound (kernels/cpu/sum_lanes.h), 23 * 2^-24 of sum |x|: it
// covers the u |s| term too, since |s| <= sum |x|. tests/kernels/test_cpu_sum.cpp checks it closely.
constexpr double kSumBound = 23.0 / (1 << 24);

// Sizes just below, at and above the grain and the first split (2 G), several grains, and a large
// odd size.
const std::vector<int64_t> kSizes = {1, 7, G - 1, G, G + 1, 2 * G - 1, 2 * G, 2 * G + 1, 3 * G + 7, 10 * G + 13};

template <typename T>
std::vector<T> random_vector(int64_t n, unsigned seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

StridedDesc strided(const void* data, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  StridedDesc d;
  d.data = const_cast<void*>(data);
  d.ndim = static_cast<int>(shape.size());
  for (int i = 0; i < d.ndim; ++i) {
    d.shape[i] = shape[i];
    d.strides[i] = strides[i];
  }
  return d;
}

StridedDesc contiguous(const void* data, std::vector<int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    step *= shape[i];
  }
  return strided(data, shape, strides);
}

// Restores the calling thread's kernel thread count when a test ends, even by an exception.
struct ThreadsGuard {
  int saved = cpu::kernel_threads();
  ~ThreadsGuard() { cpu::set_kernel_threads(saved); }
};

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Runs `compute` (which returns the kernel's output) with 1, 2 and 3 threads; requires the same
// bits from all three and returns the 1-thread output.
template <typename T>
std::vector<T> same_for_all_thread_counts(const std::function<std::vector<T>()>& compute) {
  ThreadsGuard guard;
  cpu::set_kernel_threads(1);
  const std::vector<T> one = compute();
  for (int threads : {2, 3}) {
    cpu::set_kernel_threads(threads);
    const std::vector<T> many = compute();
    INFO("threads " << threads);
    REQUIRE(same_bits(one, many));
  }
  return one;
}

// The first index where got and want differ (exactly), or -1.
template <typename T>
int64_t first_mismatch(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
  return -1;
}

template <typename T>
T apply(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::Add: return x + y;
    case BinaryOp::Sub: return x - y;
    case BinaryOp::Mul: return x * y;
    case BinaryOp::Div: return x / y;
  }
  return T(0);
}

// out = a op b on strided views of a [rows, cols] shape; the reference walks the indices.
template <typename T>
void check_binary(BinaryOp op, const std::vector<T>& a, StridedDesc da, const std::vector<T>& b, StridedDesc db) {
  const int64_t n = da.numel();
  auto got = same_for_all_thread_counts<T>([&] {
    std::vector<T> out(static_cast<size_t>(n));
    host().binary(op, dtype_of<T>::value, da, db, out.data(), Stream{});
    return out;
  });
  std::vector<T> want(static_cast<size_t>(n));
  const int64_t cols = da.shape[da.ndim - 1], rows = cols ? n / cols : 0;
  const int64_t last = da.ndim - 1;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t ia = (da.ndim == 2 ? i * da.strides[0] : 0) + j * da.strides[last];
      const int64_t ib = (db.ndim == 2 ? i * db.strides[0] : 0) + j * db.strides[last];
      want[static_cast<size_t>(i * cols + j)] = apply(op, a[static_cast<size_t>(ia)], b[static_cast<size_t>(ib)]);
    }
  REQUIRE(first_mismatch(got, want) == -1);
}

}  // namespace

TEST_CASE("parallel_range covers every index once, on as many parts as the grain allows", "[kernels][parallel]") {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3}) {
    cpu::set_kernel_threads(threads);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{99}, int64_t{199}, int64_t{200}, int64_t{1001}}) {
      std::vector<int> hits(static_cast<size_t>(n), 0);
      std::vector<int64_t> begins;
      std::mutex mutex;
      cpu::parallel_range(n, 100, [&](int64_t begin, int64_t end) {
        std::lock_guard<std::mutex> lock(mutex);
        begins.push_back(begin);
        for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
      });
      for (int h : hits) REQUIRE(h == 1);
      const int64_t parts = n == 0                    ? 0
                            : n < 200 || threads == 1 ? 1
                                                      : std::min<int64_t>(cpu::kPartsPerThread * threads, n / 100);
      INFO("n " << n << ", threads " << threads);
      REQUIRE(static_cast<int64_t>(begins.size()) == parts);
    }
  }
}

TEST_CASE("a kernel called inside a parallel part splits again without deadlock", "[kernels][parallel]") {
  ThreadsGuard guard;
  cpu::set_kernel_threads(2);
  const int64_t n = 4 * G + 1;
  const auto a = random_vector<float>(n, 1), b = random_vector<float>(n, 2);
  std::vector<std::vector<float>> outs(6, std::vector<float>(static_cast<size_t>(n)));
  cpu::parallel_for(6, [&](int part) {
    host().binary(BinaryOp::Add, DType::f32, contiguous(a.data(), {n}), contiguous(b.data(), {n}),
                  outs[static_cast<size_t>(part)].data(), Stream{});
  });
  for (const auto& out : outs)
    for (int64_t i = 0; i < n; i += 997)
      REQUIRE(out[static_cast<size_t>(i)] == a[static_cast<size_t>(i)] + b[static_cast<size_t>(i)]);
}

TEST_CASE("binary ops split across threads match one thread and the plain loop", "[kernels][parallel]") {
  for (int64_t n : kSizes) {
    INFO("n " << n);
    const auto a = random_vector<float>(n, 3), b = random_vector<float>(n, 4, 0.5, 2.0);
    for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div})
      check_binary(op, a, contiguous(a.data(), {n}), b, contiguous(b.data(), {n}));
    // One operand a single value (stride 0): the register fast path.
    check_binary(BinaryOp::Mul, a, contiguous(a.data(), {n}), b, strided(b.data(), {n}, {0}));
    check_binary(BinaryOp::Sub, a, strided(a.data(), {n}, {0}), b, contiguous(b.data(), {n}));
  }
  const auto ad = random_vector<double>(3 * G + 7, 5), bd = random_vector<double>(3 * G + 7, 6);
  check_binary(BinaryOp::Add, ad, contiguous(ad.data(), {3 * G + 7}), bd, contiguous(bd.data(), {3 * G + 7}));
}

TEST_CASE("broadcast and strided binary ops split by ranges that start mid-row", "[kernels][parallel]") {
  // A bias row broadcast down an odd number of rows; rows of 333 so part boundaries fall mid-row.
  for (int64_t rows : {int64_t{1}, G / 333, 2 * G / 333 + 1, 10 * G / 333 + 3}) {
    INFO("rows " << rows);
    const int64_t cols = 333;
    const auto a = random_vector<float>(rows * cols, 7), bias = random_vector<float>(cols, 8);
    check_binary(BinaryOp::Add, a, contiguous(a.data(), {rows, cols}), bias,
                 strided(bias.data(), {rows, cols}, {0, 1}));
    // A column broadcast across each row: stride 0 in the inner dimension.
    const auto column = random_vector<float>(rows, 9);
    check_binary(BinaryOp::Mul, a, contiguous(a.data(), {rows, cols}), column,
                 strided(column.data(), {rows, cols}, {1, 0}));
    // A transposed operand: [rows, cols] read from a [cols, rows] buffer.
    const auto t = random_vector<float>(rows * cols, 10);
    check_binary(BinaryOp::Sub, t, strided(t.data(), {rows, cols}, {1, rows}), a, contiguous(a.data(), {rows, cols}));
    // A slice: every row of a [rows, cols + 5] buffer, first `cols` columns.
    const auto wide = random_vector<float>(rows * (cols + 5), 11);
    check_binary(BinaryOp::Div, wide, strided(wide.data(), {rows, cols}, {cols + 5, 1}), a,
                 contiguous(a.data(), {rows, cols}));
  }
  const int64_t rows = 3 * G / 100 + 1, cols = 100;
  const auto ad = random_vector<double>(rows * cols, 12), bd = random_vector<double>(cols, 13);
  check_binary(BinaryOp::Add, ad, contiguous(ad.data(), {rows, cols}), bd, strided(bd.data(), {rows, cols}, {0, 1}));
}

TEST_CASE("empty tensors are left alone by every split kernel", "[kernels][parallel]") {
  ThreadsGuard guard;
  cpu::set_kernel_threads(3);
  float sentinel = 42.0f;
  host().binary(BinaryOp::Add, DType::f32, contiguous(&sentinel, {0, 5}), contiguous(&sentinel, {0, 5}), &sentinel,
                Stream{});
  host().unary(UnaryOp::Relu, DType::f32, &sentinel, &sentinel, 0, 0.0, Stream{});
  host().unary_backward(UnaryOp::Tanh, DType::f32, &sentinel, &sentinel, &sentinel, 0, 0.0, Stream{});
  host().fill(DType::f32, &sentinel, 0, 1.0, Stream{});
  host().copy(DType::f32, contiguous(&sentinel, {5, 0}), DType::f32, contiguous(&sentinel, {5, 0}), Stream{});
  host().softmax(DType::f32, &sentinel, &sentinel, 0, 10, 1, false, Stream{});
  host().reduce(ReduceOp::Sum, DType::f32, &sentinel, &sentinel, nullptr, 0, 10, 1, Stream{});
  host().reduce(ReduceOp::Max, DType::f32, &sentinel, &sentinel, nullptr, 3, 0, 0, Stream{});
  host().sgd_step(DType::f32, &sentinel, &sentinel, nullptr, 0, SgdStepArgs{}, Stream{});
  REQUIRE(sentinel == 42.0f);
  // A sum over an empty dimension is 0 in every output.
  std::vector<float> y(7, 5.0f);
  host().reduce(ReduceOp::Sum, DType::f32, &sentinel, y.data(), nullptr, 7, 0, 1, Stream{});
  for (float v : y) REQUIRE(v == 0.0f);
}

TEST_CASE("unary forward and backward split across threads match one thread and the functor", "[kernels][parallel]") {
  for (int64_t n : kSizes) {
    INFO("n " << n);
    const auto x = random_vector<float>(n, 14, -3.0, 3.0), dy = random_vector<float>(n, 15);
    // Relu (grain kGrain) and Tanh (libm-bound, a smaller grain).
    auto relu = same_for_all_thread_counts<float>([&] {
      std::vector<float> y(static_cast<size_t>(n));
      host().unary(UnaryOp::Relu, DType::f32, x.data(), y.data(), n, 0.0, Stream{});
      return y;
    });
    auto tanh_y = same_for_all_thread_counts<float>([&] {
      std::vector<float> y(static_cast<size_t>(n));
      host().unary(UnaryOp::Tanh, DType::f32, x.data(), y.data(), n, 0.0, Stream{});
      return y;
    });
    auto tanh_dx = same_for_all_thread_counts<float>([&] {
      std::vector<float> dx(static_cast<size_t>(n));
      host().unary_backward(UnaryOp::Tanh, DType::f32, tanh_y.data(), dy.data(), dx.data(), n, 0.0, Stream{});
      return dx;
    });
    auto relu_dx = same_for_all_thread_counts<float>([&] {
      std::vector<float> dx(static_cast<size_t>(n));
      host().unary_backward(UnaryOp::Relu, DType::f32, x.data(), dy.data(), dx.data(), n, 0.0, Stream{});
      return dx;
    });
    std::vector<float> want_relu(x.size()), want_tanh(x.size()), want_tanh_dx(x.size()), want_relu_dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      want_relu[i] = unary_ops::Relu::forward(x[i], 0.0f);
      want_tanh[i] = unary_ops::Tanh::forward(x[i], 0.0f);
      want_tanh_dx[i] = unary_ops::Tanh::backward(want_tanh[i], dy[i], 0.0f);
      want_relu_dx[i] = unary_ops::Relu::backward(x[i], dy[i], 0.0f);
    }
    REQUIRE(first_mismatch(relu, want_relu) == -1);
    REQUIRE(first_mismatch(tanh_y, want_tanh) == -1);
    // The library may contract dy * (1 - y * y) into fused multiply-adds (-march), this file not.
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(std::fabs(tanh_dx[i] - want_tanh_dx[i]) <= 1e-6f);
    REQUIRE(first_mismatch(relu_dx, want_relu_dx) == -1);
  }
  const int64_t n = 3 * G + 7;
  const auto x = random_vector<double>(n, 16);
  auto y = same_for_all_thread_counts<double>([&] {
    std::vector<double> out(static_cast<size_t>(n));
    host().unary(UnaryOp::MulScalar, DType::f64, x.data(), out.data(), n, 1.5, Stream{});
    return out;
  });
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == x[i] * 1.5);
}

TEST_CASE("a full sum is cut at fixed chunks: the same bits on any thread count", "[kernels][parallel]") {
  // Chunks are 1 Ki elements and blocks of chunks (what threads split) 64 Ki; these sizes straddle
  // both and the grain.
  std::vector<int64_t> sizes = kSizes;
  for (int64_t n : {int64_t{1} << 10, (int64_t{1} << 10) + 1, (int64_t{1} << 16) - 3, (int64_t{1} << 20) + 5})
    sizes.push_back(n);
  for (int64_t n : sizes) {
    INFO("n " << n);
    const auto x = random_vector<float>(n, 17);
    auto got = same_for_all_thread_counts<float>([&] {
      std::vector<float> y(1);
      host().reduce(ReduceOp::Sum, DType::f32, x.data(), y.data(), nullptr, 1, n, 1, Stream{});
      return y;
    });
    double want = 0, magnitude = 0;
    for (float v : x) want += v, magnitude += std::fabs(v);
    REQUIRE(std::fabs(double(got[0]) - want) <= kSumBound * magnitude);
  }
  const int64_t n = 10 * G + 13;
  const auto x = random_vector<double>(n, 18);
  auto got = same_for_all_thread_counts<double>([&] {
    std::vector<double> y(1);
    host().reduce(ReduceOp::Sum, DType::f64, x.data(), y.data(), nullptr, 1, n, 1, Stream{});
    return y;
  });
  long double want = 0;
  for (double v : x) want += v;
  REQUIRE(std::fabs(got[0] - static_cast<double>(want)) <= 1e-12 * static_cast<double>(n));
}

TEST_CASE("sums over outer rows and inner columns split across threads match a double loop", "[kernels][parallel]") {
  struct Case {
    int64_t outer, r, inner;
  };
  // Rows (inner == 1), columns over several tiles (inner > 256), both, and a long lone column tile.
  const std::vector<Case> cases = {{2 * G / 1000 + 1, 1000, 1}, {7, 3 * G + 7, 1},  {1, 300, 777}, {3, 129, 601},
                                   {1, 2 * G + 1, 3},           {G / 64 + 3, 64, 5}};
  for (const Case& c : cases) {
    INFO("outer " << c.outer << ", r " << c.r << ", inner " << c.inner);
    const auto x = random_vector<float>(c.outer * c.r * c.inner, 19);
    auto got = same_for_all_thread_counts<float>([&] {
      std::vector<float> y(static_cast<size_t>(c.outer * c.inner));
      host().reduce(ReduceOp::Sum, DType::f32, x.data(), y.data(), nullptr, c.outer, c.r, c.inner, Stream{});
      return y;
    });
    for (int64_t o = 0; o < c.outer; ++o)
      for (int64_t i = 0; i < c.inner; ++i) {
        double want = 0, magnitude = 0;
        for (int64_t j = 0; j < c.r; ++j) {
          const float v = x[static_cast<size_t>((o * c.r + j) * c.inner + i)];
          want += v;
          magnitude += std::fabs(v);
        }
        REQUIRE(std::fabs(double(got[static_cast<size_t>(o * c.inner + i)]) - want) <= kSumBound * magnitude + 1e-6);
      }
  }
}

TEST_CASE("max and its first index split across threads, with ties and NaN", "[kernels][parallel]") {
  struct Case {
    int64_t outer, r, inner;
  };
  const std::vector<Case> cases = {{1, 10 * G + 13, 1}, {1, 3 * G + 7, 1}, {2 * G / 500 + 1, 500, 1},
                                   {1, 100, 3 * G + 7}, {5, 70, 301},      {1, G - 1, 1}};
  for (const Case& c : cases) {
    for (int variant = 0; variant < 3; ++variant) {  // 0: plain, 1: a tie for the maximum, 2: NaNs
      INFO("outer " << c.outer << ", r " << c.r << ", inner " << c.inner << ", variant " << variant);
      auto x = random_vector<float>(c.outer * c.r * c.inner, 20);
      const int64_t j1 = c.r / 3, j2 = c.r - 2;  // in different chunks for the long rows
      for (int64_t o = 0; o < c.outer; ++o)
        for (int64_t i = 0; i < c.inner; ++i) {
          if (variant == 1) {
            x[static_cast<size_t>((o * c.r + j2) * c.inner + i)] = 5.0f;
            x[static_cast<size_t>((o * c.r + j1) * c.inner + i)] = 5.0f;
          }
          if (variant == 2) {
            x[static_cast<size_t>((o * c.r + j2) * c.inner + i)] = std::numeric_limits<float>::quiet_NaN();
            x[static_cast<size_t>((o * c.r + j1) * c.inner + i)] = std::numeric_limits<float>::quiet_NaN();
          }
        }
      std::vector<int64_t> index_one;
      auto got = same_for_all_thread_counts<float>([&] {
        std::vector<float> y(static_cast<size_t>(c.outer * c.inner));
        std::vector<int64_t> idx(y.size(), -1);
        host().reduce(ReduceOp::Max, DType::f32, x.data(), y.data(), idx.data(), c.outer, c.r, c.inner, Stream{});
        if (index_one.empty())
          index_one = idx;
        else
          REQUIRE(idx == index_one);
        return y;
      });
      for (int64_t o = 0; o < c.outer; ++o)
        for (int64_t i = 0; i < c.inner; ++i) {
          float best = x[static_cast<size_t>(o * c.r * c.inner + i)];
          int64_t at = 0;
          for (int64_t j = 1; j < c.r; ++j) {
            const float v = x[static_cast<size_t>((o * c.r + j) * c.inner + i)];
            if (v > best || (std::isnan(v) && !std::isnan(best))) best = v, at = j;
          }
          const size_t k = static_cast<size_t>(o * c.inner + i);
          REQUIRE(index_one[k] == at);
          REQUIRE((std::isnan(best) ? std::isnan(got[k]) : got[k] == best));
        }
    }
  }
}

TEST_CASE("softmax and log_softmax forward and backward split across threads", "[kernels][parallel]") {
  struct Case {
    int64_t outer, c, inner;
  };
  const std::vector<Case> cases = {{1, 10, 1},    {G / 8 / 100 + 1, 100, 1}, {3 * G / 100 + 7, 100, 1}, {5, 3, 601},
                                   {2, 257, 300}, {G / 10 + 1, 10, 3}};
  for (const Case& s : cases) {
    for (bool log : {false, true}) {
      INFO("outer " << s.outer << ", c " << s.c << ", inner " << s.inner << ", log " << log);
      const int64_t n = s.outer * s.c * s.inner;
      const auto x = random_vector<float>(n, 21, -4.0, 4.0), dy = random_vector<float>(n, 22);
      auto y = same_for_all_thread_counts<float>([&] {
        std::vector<float> out(static_cast<size_t>(n));
        host().softmax(DType::f32, x.data(), out.data(), s.outer, s.c, s.inner, log, Stream{});
        return out;
      });
      auto dx = same_for_all_thread_counts<float>([&] {
        std::vector<float> out(static_cast<size_t>(n));
        host().softmax_backward(DType::f32, y.data(), dy.data(), out.data(), s.outer, s.c, s.inner, log, Stream{});
        return out;
      });
      for (int64_t o = 0; o < s.outer; ++o)
        for (int64_t i = 0; i < s.inner; ++i) {
          auto at = [&](int64_t j) { return static_cast<size_t>((o * s.c + j) * s.inner + i); };
          double max = -INFINITY, sum = 0, dot = 0, dsum = 0;
          for (int64_t j = 0; j < s.c; ++j) max = std::max(max, double(x[at(j)]));
          for (int64_t j = 0; j < s.c; ++j) sum += std::exp(double(x[at(j)]) - max);
          for (int64_t j = 0; j < s.c; ++j) {
            const double p = std::exp(double(x[at(j)]) - max) / sum;
            dot += double(dy[at(j)]) * p;
            dsum += dy[at(j)];
          }
          for (int64_t j = 0; j < s.c; ++j) {
            const double p = std::exp(double(x[at(j)]) - max) / sum;
            const double want_y = log ? double(x[at(j)]) - max - std::log(sum) : p;
            const double want_dx = log ? double(dy[at(j)]) - p * dsum : p * (double(dy[at(j)]) - dot);
            REQUIRE(std::fabs(double(y[at(j)]) - want_y) <= 1e-5 * (1 + std::fabs(want_y)));
            REQUIRE(std::fabs(double(dx[at(j)]) - want_dx) <= 1e-5 * (1 + std::fabs(want_dx)));
          }
        }
    }
  }
}

TEST_CASE("cross-entropy forward and backward split across rows", "[kernels][parallel]") {
  for (int64_t rows : {int64_t{1}, G / 8 / 10 - 1, G / 8 / 10 * 2 + 1, 3 * G / 10 + 7}) {
    INFO("rows " << rows);
    const int64_t c = 10;
    const auto x = random_vector<double>(rows * c, 23, -3.0, 3.0);
    std::vector<int64_t> labels(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) labels[static_cast<size_t>(r)] = (r * 7 + 3) % c;
    std::vector<double> probs_one;
    auto loss = same_for_all_thread_counts<double>([&] {
      std::vector<double> l(static_cast<size_t>(rows)), p(static_cast<size_t>(rows * c));
      host().cross_entropy_forward(DType::f64, x.data(), labels.data(), l.data(), p.data(), rows, c, 0.1, Stream{});
      if (probs_one.empty())
        probs_one = p;
      else
        REQUIRE(same_bits(p, probs_one));
      return l;
    });
    const auto dloss = random_vector<double>(rows, 24);
    auto dlogits = same_for_all_thread_counts<double>([&] {
      std::vector<double> d(static_cast<size_t>(rows * c));
      host().cross_entropy_backward(DType::f64, probs_one.data(), labels.data(), dloss.data(), 1, 0.5, d.data(), rows,
                                    c, 0.1, Stream{});
      return d;
    });
    for (int64_t r = 0; r < rows; ++r) {
      const double* xr = x.data() + r * c;
      double max = -INFINITY, sum = 0, mean = 0;
      for (int64_t j = 0; j < c; ++j) max = std::max(max, xr[j]), mean += xr[j] / double(c);
      for (int64_t j = 0; j < c; ++j) sum += std::exp(xr[j] - max);
      const int64_t label = labels[static_cast<size_t>(r)];
      const double want = max + std::log(sum) - 0.9 * xr[label] - 0.1 * mean;
      REQUIRE(std::fabs(loss[static_cast<size_t>(r)] - want) <= 1e-12 * (1 + std::fabs(want)));
      for (int64_t j = 0; j < c; ++j) {
        const double target = (j == label ? 0.9 : 0.0) + 0.01;
        const double want_d = 0.5 * dloss[static_cast<size_t>(r)] * (std::exp(xr[j] - max) / sum - target);
        REQUIRE(std::fabs(dlogits[static_cast<size_t>(r * c + j)] - want_d) <= 1e-12);
      }
    }
  }
}

TEST_CASE("strided, transposed and dense copies and fill split across threads", "[kernels][parallel]") {
  for (int64_t n : kSizes) {
    INFO("n " << n);
    // Dense memcpy.
    const auto x = random_vector<float>(n, 25);
    auto dense = same_for_all_thread_counts<float>([&] {
      std::vector<float> out(static_cast<size_t>(n));
      host().copy(DType::f32, contiguous(x.data(), {n}), DType::f32, contiguous(out.data(), {n}), Stream{});
      return out;
    });
    REQUIRE(same_bits(dense, x));
    // Fill.
    auto filled = same_for_all_thread_counts<float>([&] {
      std::vector<float> out(static_cast<size_t>(n), 0.0f);
      host().fill(DType::f32, out.data(), n, 2.5, Stream{});
      return out;
    });
    for (float v : filled) REQUIRE(v == 2.5f);
    // Every other element, converted to double: the strided walk with a dtype change.
    const auto wide = random_vector<float>(2 * n, 26);
    auto converted = same_for_all_thread_counts<double>([&] {
      std::vector<double> out(static_cast<size_t>(n));
      host().copy(DType::f32, strided(wide.data(), {n}, {2}), DType::f64, contiguous(out.data(), {n}), Stream{});
      return out;
    });
    for (int64_t i = 0; i < n; ++i)
      REQUIRE(converted[static_cast<size_t>(i)] == double(wide[static_cast<size_t>(2 * i)]));
  }
  // Transposes (the blocked path), odd shapes whose blocks end part-way; and a sliced 3-d view.
  for (const auto& shape : std::vector<std::pair<int64_t, int64_t>>{
           {33, 45}, {G / 100 + 1, 101}, {3 * G / 257 + 7, 257}, {1000, 31}, {1, 5000}}) {
    // Named copies, not structured bindings: C++17 lambdas cannot capture those (clang rejects it).
    const int64_t rows = shape.first, cols = shape.second;
    INFO("rows " << rows << ", cols " << cols);
    const auto src = random_vector<double>(rows * cols, 27);  // a [cols, rows] buffer, read as [rows, cols]
    auto got = same_for_all_thread_counts<double>([&] {
      std::vector<double> out(static_cast<size_t>(rows * cols));
      host().copy(DType::f64, strided(src.data(), {rows, cols}, {1, rows}), DType::f64,
                  contiguous(out.data(), {rows, cols}), Stream{});
      return out;
    });
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        REQUIRE(got[static_cast<size_t>(i * cols + j)] == src[static_cast<size_t>(j * rows + i)]);
  }
  const int64_t a = 7, b = G / 50 + 3, c = 50;
  const auto src = random_vector<float>(a * (b + 2) * c, 28);
  auto got = same_for_all_thread_counts<float>([&] {
    std::vector<float> out(static_cast<size_t>(a * b * c));
    host().copy(DType::f32, strided(src.data() + c, {a, b, c}, {(b + 2) * c, c, 1}), DType::f32,
                contiguous(out.data(), {a, b, c}), Stream{});
    return out;
  });
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t k = 0; k < c; ++k)
        REQUIRE(got[static_cast<size_t>((i * b + j) * c + k)] ==
                src[static_cast<size_t>((i * (b + 2) + j + 1) * c + k)]);
}

TEST_CASE("SGD and Adam steps split across threads give the same parameters", "[kernels][parallel]") {
  for (int64_t n : {G - 1, 2 * G + 1, 10 * G + 13}) {
    INFO("n " << n);
    const auto p0 = random_vector<float>(n, 29), g = random_vector<float>(n, 30), m0 = random_vector<float>(n, 31);
    const auto v0 = random_vector<float>(n, 32, 0.0, 1.0);
    SgdStepArgs sgd;
    sgd.lr = 0.1;
    sgd.momentum = 0.9;
    sgd.weight_decay = 0.01;
    sgd.nesterov = true;
    auto sgd_p = same_for_all_thread_counts<float>([&] {
      std::vector<float> p = p0, buf = m0;
      host().sgd_step(DType::f32, p.data(), g.data(), buf.data(), n, sgd, Stream{});
      p.insert(p.end(), buf.begin(), buf.end());
      return p;
    });
    AdamStepArgs adam;
    adam.lr = 0.01;
    adam.weight_decay = 0.1;
    adam.decoupled_weight_decay = true;
    adam.step = 3;
    auto adam_p = same_for_all_thread_counts<float>([&] {
      std::vector<float> p = p0, m = m0, v = v0;
      host().adam_step(DType::f32, p.data(), g.data(), m.data(), v.data(), n, adam, Stream{});
      p.insert(p.end(), m.begin(), m.end());
      p.insert(p.end(), v.begin(), v.end());
      return p;
    });
    // Against the formulas in double (the kernel rounds its factors to float, hence the tolerance).
    for (int64_t i = 0; i < n; i += 101) {
      const size_t k = static_cast<size_t>(i);
      const double d = double(g[k]) + 0.01 * p0[k];
      const double buf = 0.9 * m0[k] + d;
      REQUIRE(std::fabs(sgd_p[k] - (p0[k] - 0.1 * (d + 0.9 * buf))) <= 1e-5);
      REQUIRE(std::fabs(sgd_p[static_cast<size_t>(n) + k] - buf) <= 1e-5);
      const double pd = p0[k] * (1 - 0.01 * 0.1), mi = 0.9 * m0[k] + 0.1 * g[k];
      const double vi = 0.999 * v0[k] + 0.001 * double(g[k]) * g[k];
      const double want =
          pd - 0.01 / (1 - std::pow(0.9, 3)) * mi / (std::sqrt(vi) / std::sqrt(1 - std::pow(0.999, 3)) + 1e-8);
      REQUIRE(std::fabs(adam_p[k] - want) <= 1e-5);
    }
  }
}
