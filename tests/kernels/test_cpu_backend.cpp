// tests/kernels/test_cpu_backend.cpp: the CPU backend called directly on raw buffers, each kernel
// checked against a plain formula computed in double.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <ringgrad/core/cuda.h>
#include <ringgrad/core/device.h>
#include <ringgrad/core/base/error.h>
#include <ringgrad/kernels/backend.h>
#include <ringgrad/core/base/philox.h>

using namespace ringgrad;
using namespace ringgrad::kernels;

namespace {

Backend& cpu() { return backend_for(DeviceKind::CPU, "test"); }

template <typename T>
std::vector<T> random_vector(size_t n, unsigned seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

StridedDesc strided(void* data, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  StridedDesc d;
  d.data = data;
  d.ndim = static_cast<int>(shape.size());
  for (int i = 0; i < d.ndim; ++i) {
    d.shape[i] = shape[i];
    d.strides[i] = strides[i];
  }
  return d;
}

StridedDesc contiguous(void* data, std::vector<int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    step *= shape[i];
  }
  return strided(data, shape, strides);
}

// The reference GEMM: a triple loop in double over operands stored as GemmArgs describes them.
template <typename T>
std::vector<double> naive_gemm(const GemmArgs& g, const std::vector<T>& a, const std::vector<T>& b,
                               const std::vector<T>& c0, int64_t p) {
  std::vector<double> c(static_cast<size_t>(g.m * g.ldc));
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double acc = 0.0;
      for (int64_t l = 0; l < g.k; ++l) {
        const double av = g.trans_a ? a[p * g.stride_a + l * g.lda + i] : a[p * g.stride_a + i * g.lda + l];
        const double bv = g.trans_b ? b[p * g.stride_b + j * g.ldb + l] : b[p * g.stride_b + l * g.ldb + j];
        acc += av * bv;
      }
      double v = g.alpha * acc;
      if (g.beta != 0.0) v += g.beta * c0[p * g.stride_c + i * g.ldc + j];
      if (g.bias) v += static_cast<const T*>(g.bias)[j];
      if (g.activation == Activation::Relu) v = v > 0 ? v : 0;
      if (g.activation == Activation::GeluTanh)
        v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (v + 0.044715 * v * v * v)));
      c[i * g.ldc + j] = v;
    }
  }
  return c;
}

// Runs one (possibly batched) GEMM on padded buffers and compares every entry of C with the
// reference. Leading dimensions are padded by 3 so that a kernel ignoring them would fail.
template <typename T>
void check_gemm(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, double beta, int64_t batch = 1,
                bool share_a = false, bool with_bias = false, Activation act = Activation::None) {
  GemmArgs g;
  g.dtype = std::is_same<T, float>::value ? DType::f32 : DType::f64;
  g.m = m, g.n = n, g.k = k;
  g.trans_a = trans_a, g.trans_b = trans_b;
  g.lda = (trans_a ? m : k) + 3;
  g.ldb = (trans_b ? k : n) + 3;
  g.ldc = n + 3;
  g.alpha = 1.25;
  g.beta = beta;
  const int64_t a_size = (trans_a ? k : m) * g.lda, b_size = (trans_b ? n : k) * g.ldb, c_size = m * g.ldc;
  g.batch = batch;
  g.stride_a = share_a ? 0 : a_size;
  g.stride_b = b_size;
  g.stride_c = c_size;
  std::vector<T> a = random_vector<T>(static_cast<size_t>(share_a ? a_size : a_size * batch), 1);
  std::vector<T> b = random_vector<T>(static_cast<size_t>(b_size * batch), 2);
  std::vector<T> c = random_vector<T>(static_cast<size_t>(c_size * batch), 3);
  if (beta == 0.0)  // beta = 0 must ignore C entirely, even NaN
    for (auto& x : c) x = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> bias = random_vector<T>(static_cast<size_t>(n), 4);
  const std::vector<T> c0 = c;
  g.a = a.data(), g.b = b.data(), g.c = c.data();
  g.bias = with_bias ? bias.data() : nullptr;
  g.activation = act;

  cpu().gemm(g, nullptr);

  const double tol = std::is_same<T, float>::value ? 1e-5 * (k + 4) : 1e-13 * (k + 4);
  for (int64_t p = 0; p < batch; ++p) {
    const std::vector<double> want = naive_gemm(g, a, b, c0, p);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        INFO("batch " << p << " C[" << i << ", " << j << "] of " << m << "x" << n << "x" << k);
        CHECK(c[p * c_size + i * g.ldc + j] == Approx(want[i * g.ldc + j]).margin(tol));
      }
    }
  }
}

}  // namespace

TEST_CASE("gemm: all transpose combinations agree with a triple loop at odd sizes", "[kernels]") {
  const bool trans_a = GENERATE(false, true);
  const bool trans_b = GENERATE(false, true);
  const int64_t m = GENERATE(1, 7, 33);
  const int64_t n = GENERATE(1, 7, 33);
  const int64_t k = GENERATE(1, 7, 33);
  INFO("trans_a " << trans_a << " trans_b " << trans_b);
  check_gemm<double>(m, n, k, trans_a, trans_b, /*beta=*/0.5);
  check_gemm<float>(m, n, k, trans_a, trans_b, /*beta=*/0.0);
}

TEST_CASE("gemm: a 17x33x65 product is right in float32 and float64", "[kernels]") {
  const bool trans_a = GENERATE(false, true);
  const bool trans_b = GENERATE(false, true);
  INFO("trans_a " << trans_a << " trans_b " << trans_b);
  check_gemm<float>(17, 33, 65, trans_a, trans_b, /*beta=*/1.0);
  check_gemm<double>(17, 33, 65, trans_a, trans_b, /*beta=*/0.0);
}

TEST_CASE("gemm: a product split into bands across threads is right, by rows and by columns", "[kernels]") {
  // 2*m*n*k >= 2^24 FLOPs, so gemm.cpp splits C into bands, one per thread: by rows when m >= n,
  // by columns (and the bias with them) otherwise. Every transpose case moves the band's pointer
  // differently, so all four are checked in both directions.
  const bool trans_a = GENERATE(false, true);
  const bool trans_b = GENERATE(false, true);
  INFO("trans_a " << trans_a << " trans_b " << trans_b);
  ringgrad::set_num_threads(3);  // more bands than cores, and an uneven split of 257 and 131
  check_gemm<float>(257, 131, 260, trans_a, trans_b, /*beta=*/0.5, /*batch=*/1, false, /*with_bias=*/true,
                    Activation::Relu);
  check_gemm<float>(131, 257, 260, trans_a, trans_b, /*beta=*/0.0, /*batch=*/2, false, /*with_bias=*/true,
                    Activation::Relu);
  ringgrad::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST_CASE("gemm: beta = 0 overwrites a C that holds NaN", "[kernels]") {
  check_gemm<float>(5, 6, 7, false, false, /*beta=*/0.0);
  check_gemm<double>(5, 6, 7, true, true, /*beta=*/0.0);
}

TEST_CASE("gemm: batched products may share an operand through stride 0", "[kernels]") {
  check_gemm<float>(7, 9, 11, false, true, /*beta=*/0.0, /*batch=*/4, /*share_a=*/true);
  check_gemm<double>(7, 9, 11, true, false, /*beta=*/0.5, /*batch=*/3, /*share_a=*/true);
}

TEST_CASE("gemm: the bias and relu epilogue matches relu(A B + bias)", "[kernels]") {
  check_gemm<float>(9, 13, 17, false, false, /*beta=*/0.0, /*batch=*/2, false, /*with_bias=*/true, Activation::Relu);
  check_gemm<double>(1, 13, 17, true, true, /*beta=*/0.5, /*batch=*/1, false, /*with_bias=*/true, Activation::Relu);
}

TEST_CASE("gemm: the bias and tanh-GELU epilogue matches gelu(A B + bias)", "[kernels]") {
  check_gemm<double>(6, 11, 5, true, false, /*beta=*/0.0, /*batch=*/2, false, /*with_bias=*/true, Activation::GeluTanh);
}

TEST_CASE("gemm: k = 0 leaves beta C plus bias", "[kernels]") {
  check_gemm<double>(3, 4, 0, false, false, /*beta=*/0.5, 1, false, /*with_bias=*/true);
  check_gemm<float>(3, 4, 0, true, false, /*beta=*/0.0, 1, false, /*with_bias=*/true);
}

TEST_CASE("gemm: empty m or n writes nothing and does not fail", "[kernels]") {
  GemmArgs g;
  g.m = 0, g.n = 5, g.k = 3;
  CHECK_NOTHROW(cpu().gemm(g, nullptr));
  g.m = 4, g.n = 0;
  CHECK_NOTHROW(cpu().gemm(g, nullptr));
}

TEST_CASE("gemm: a single-row operand accepts any leading dimension", "[kernels]") {
  // A [1, k] tensor can carry a stride of 1 (or 0) along its size-1 dimension.
  std::vector<float> a = {1, 2, 3}, b = {1, 0, 0, 1, 1, 1}, c(2);
  GemmArgs g;
  g.m = 1, g.n = 2, g.k = 3;
  g.a = a.data(), g.lda = 1;
  g.b = b.data(), g.ldb = 2;
  g.c = c.data(), g.ldc = 0;
  cpu().gemm(g, nullptr);
  CHECK(c[0] == 4.0f);
  CHECK(c[1] == 5.0f);
}

TEST_CASE("copy: gathering a transposed view gives the transpose, with a dtype cast", "[kernels]") {
  const int64_t rows = 5, cols = 7;
  std::vector<float> src(rows * cols);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  std::vector<double> dst(rows * cols, -1.0);
  // The [cols, rows] view of a [rows, cols] matrix: strides swapped.
  cpu().copy(DType::f32, strided(src.data(), {cols, rows}, {1, cols}), DType::f64, contiguous(dst.data(), {cols, rows}),
             nullptr);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < rows; ++j) CHECK(dst[i * rows + j] == src[j * cols + i]);
}

TEST_CASE("copy: converts uint8 to float32 and float64 to int64 by truncation", "[kernels]") {
  std::vector<uint8_t> bytes = {0, 1, 128, 255};
  std::vector<float> floats(4);
  cpu().copy(DType::u8, contiguous(bytes.data(), {4}), DType::f32, contiguous(floats.data(), {4}), nullptr);
  CHECK(floats == std::vector<float>{0.f, 1.f, 128.f, 255.f});
  std::vector<double> d = {2.75, -1.5};
  std::vector<int64_t> ints(2);
  cpu().copy(DType::f64, contiguous(d.data(), {2}), DType::i64, contiguous(ints.data(), {2}), nullptr);
  CHECK(ints == std::vector<int64_t>{2, -1});
}

TEST_CASE("fill and arange: write the value and the range in every storage dtype", "[kernels]") {
  std::vector<int64_t> i64(5);
  cpu().arange(DType::i64, i64.data(), 5, 3.0, 2.0, nullptr);
  CHECK(i64 == std::vector<int64_t>{3, 5, 7, 9, 11});
  std::vector<float> f(4);
  cpu().fill(DType::f32, f.data(), 4, 0.5, nullptr);
  CHECK(f == std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f});
}

TEST_CASE("binary: broadcasting through stride 0 matches the expanded operation", "[kernels]") {
  const int64_t rows = 3, cols = 5;
  std::vector<double> a = random_vector<double>(rows * cols, 5);
  std::vector<double> row = random_vector<double>(cols, 6);
  std::vector<double> col = random_vector<double>(rows, 7);
  std::vector<double> out(rows * cols);

  SECTION("a row vector broadcast over rows") {
    cpu().binary(BinaryOp::Add, DType::f64, contiguous(a.data(), {rows, cols}),
                 strided(row.data(), {rows, cols}, {0, 1}), out.data(), nullptr);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) CHECK(out[i * cols + j] == a[i * cols + j] + row[j]);
  }
  SECTION("a column vector broadcast over columns, on the left") {
    cpu().binary(BinaryOp::Sub, DType::f64, strided(col.data(), {rows, cols}, {1, 0}),
                 contiguous(a.data(), {rows, cols}), out.data(), nullptr);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) CHECK(out[i * cols + j] == col[i] - a[i * cols + j]);
  }
  SECTION("an outer product of a column and a row") {
    cpu().binary(BinaryOp::Mul, DType::f64, strided(col.data(), {rows, cols}, {1, 0}),
                 strided(row.data(), {rows, cols}, {0, 1}), out.data(), nullptr);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) CHECK(out[i * cols + j] == col[i] * row[j]);
  }
  SECTION("a single value, and a transposed operand") {
    double s = 4.0;
    // a read as its [cols, rows] transpose, divided by a scalar expanded to every element.
    std::vector<double> t(rows * cols);
    cpu().binary(BinaryOp::Div, DType::f64, strided(a.data(), {cols, rows}, {1, cols}),
                 strided(&s, {cols, rows}, {0, 0}), t.data(), nullptr);
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < rows; ++j) CHECK(t[i * rows + j] == a[j * cols + i] / 4.0);
  }
  SECTION("one element") {
    float x = 2.0f, y = 3.0f, z = 0.0f;
    cpu().binary(BinaryOp::Add, DType::f32, contiguous(&x, {}), contiguous(&y, {}), &z, nullptr);
    CHECK(z == 5.0f);
  }
}

TEST_CASE("unary: forward values and backward match the formulas", "[kernels]") {
  const std::vector<double> x = {-1.3, -0.2, 0.4, 1.7};
  std::vector<double> y(4), dx(4);
  const std::vector<double> dy = {1.0, -2.0, 0.5, 3.0};
  cpu().unary(UnaryOp::GeluTanh, DType::f64, x.data(), y.data(), 4, 0.0, nullptr);
  for (int i = 0; i < 4; ++i) {
    const double u = std::sqrt(2.0 / 3.14159265358979323846) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
    CHECK(y[i] == Approx(0.5 * x[i] * (1.0 + std::tanh(u))));
  }
  // Derivatives against central differences of the forward kernel.
  for (UnaryOp op : {UnaryOp::GeluTanh, UnaryOp::GeluErf, UnaryOp::Log, UnaryOp::PowScalar, UnaryOp::RDivScalar}) {
    const std::vector<double> xp = {0.3, 0.9, 1.4, 2.2};  // positive, for log and pow
    const double alpha = 2.5, eps = 1e-6;
    cpu().unary_backward(op, DType::f64, xp.data(), dy.data(), dx.data(), 4, alpha, nullptr);
    for (int i = 0; i < 4; ++i) {
      double lo, hi, xl = xp[i] - eps, xh = xp[i] + eps;
      cpu().unary(op, DType::f64, &xl, &lo, 1, alpha, nullptr);
      cpu().unary(op, DType::f64, &xh, &hi, 1, alpha, nullptr);
      INFO("op " << static_cast<int>(op) << " element " << i);
      CHECK(dx[i] == Approx(dy[i] * (hi - lo) / (2 * eps)).epsilon(1e-6));
    }
  }
}

TEST_CASE("reduce: sum and max over the middle axis, with first-argmax indices", "[kernels]") {
  const int64_t outer = 3, r = 5, inner = 4;
  std::vector<float> x = random_vector<float>(outer * r * inner, 8);
  x[(1 * r + 3) * inner + 2] = 10.0f;  // a tie: the first of the two must win
  x[(1 * r + 4) * inner + 2] = 10.0f;
  std::vector<float> sum(outer * inner), max(outer * inner);
  std::vector<int64_t> index(outer * inner, -1);
  cpu().reduce(ReduceOp::Sum, DType::f32, x.data(), sum.data(), nullptr, outer, r, inner, nullptr);
  cpu().reduce(ReduceOp::Max, DType::f32, x.data(), max.data(), index.data(), outer, r, inner, nullptr);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double s = 0.0;
      float best = -1e30f;
      int64_t best_j = -1;
      for (int64_t j = 0; j < r; ++j) {
        const float v = x[(o * r + j) * inner + i];
        s += v;
        if (v > best) best = v, best_j = j;
      }
      CHECK(sum[o * inner + i] == Approx(s).margin(1e-6));
      CHECK(max[o * inner + i] == best);
      CHECK(index[o * inner + i] == best_j);
    }
  }
  CHECK(index[1 * inner + 2] == 3);

  SECTION("scatter_add_dim sends the gradient of max to the argmax") {
    std::vector<float> grad(outer * inner, 1.0f), dx(outer * r * inner, 0.0f);
    cpu().scatter_add_dim(DType::f32, grad.data(), index.data(), dx.data(), outer, r, inner, nullptr);
    float total = 0.0f;
    for (float v : dx) total += v;
    CHECK(total == static_cast<float>(outer * inner));
    CHECK(dx[(1 * r + 3) * inner + 2] == 1.0f);
    CHECK(dx[(1 * r + 4) * inner + 2] == 0.0f);
  }
}

// Float lanes round more than the double accumulator this used to be: kernels/cpu/sum_lanes.h's
// bound, |y - s| <= u |s| + 22 u sum |x|, is 23 u relative for terms of one sign. A constant row is
// the hard case, since every chunk makes the same rounding errors; measured 1.1e-7 here (1.9 u).
TEST_CASE("reduce: a long float32 sum over the last axis stays within the documented bound", "[kernels]") {
  const int64_t n = 1000003;
  std::vector<float> x(n, 0.1f);
  float y = 0.0f;
  cpu().reduce(ReduceOp::Sum, DType::f32, x.data(), &y, nullptr, 1, n, 1, nullptr);
  const double exact = static_cast<double>(0.1f) * static_cast<double>(n);
  CHECK(std::fabs(y - exact) <= 23 * std::ldexp(1.0, -24) * exact);
  CHECK(std::fabs(y - exact) <= 4 * std::ldexp(1.0, -24) * exact);  // what it does now (1.9 u): a regression guard
}

TEST_CASE("softmax: every row sums to 1 and log_softmax is its log", "[kernels]") {
  const int64_t outer = 2, c = 7, inner = GENERATE(1, 3);
  std::vector<double> x = random_vector<double>(outer * c * inner, 9, -30.0, 30.0);
  x[0] = 1000.0;  // would overflow e^x without the max subtraction
  std::vector<double> y(x.size()), log_y(x.size());
  cpu().softmax(DType::f64, x.data(), y.data(), outer, c, inner, /*log=*/false, nullptr);
  cpu().softmax(DType::f64, x.data(), log_y.data(), outer, c, inner, /*log=*/true, nullptr);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double total = 0.0;
      for (int64_t j = 0; j < c; ++j) {
        const int64_t e = (o * c + j) * inner + i;
        total += y[e];
        CHECK(std::exp(log_y[e]) == Approx(y[e]).margin(1e-300));
      }
      CHECK(total == Approx(1.0).epsilon(1e-14));
    }
  }
}

TEST_CASE("softmax: the backward applies the softmax Jacobian", "[kernels]") {
  const int64_t c = 5;
  const bool log = GENERATE(false, true);
  std::vector<double> x = random_vector<double>(c, 10), dy = random_vector<double>(c, 11);
  std::vector<double> y(c), dx(c);
  cpu().softmax(DType::f64, x.data(), y.data(), 1, c, 1, log, nullptr);
  cpu().softmax_backward(DType::f64, y.data(), dy.data(), dx.data(), 1, c, 1, log, nullptr);
  // Central differences of <dy, softmax(x)> with respect to each x_j.
  for (int64_t j = 0; j < c; ++j) {
    std::vector<double> xp = x, xm = x, yp(c), ym(c);
    xp[j] += 1e-6, xm[j] -= 1e-6;
    cpu().softmax(DType::f64, xp.data(), yp.data(), 1, c, 1, log, nullptr);
    cpu().softmax(DType::f64, xm.data(), ym.data(), 1, c, 1, log, nullptr);
    double numeric = 0.0;
    for (int64_t i = 0; i < c; ++i) numeric += dy[i] * (yp[i] - ym[i]) / 2e-6;
    CHECK(dx[j] == Approx(numeric).epsilon(1e-6));
  }
}

TEST_CASE("cross_entropy: the loss matches -sum target log softmax, with label smoothing", "[kernels]") {
  const int64_t rows = 4, c = 6;
  const double eps = GENERATE(0.0, 0.1);
  std::vector<double> logits = random_vector<double>(rows * c, 12, -3.0, 3.0);
  const std::vector<int64_t> labels = {0, 5, 2, 2};
  std::vector<double> loss(rows), probs(rows * c), dlogits(rows * c);
  cpu().cross_entropy_forward(DType::f64, logits.data(), labels.data(), loss.data(), probs.data(), rows, c, eps,
                              nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    double z = 0.0;
    for (int64_t j = 0; j < c; ++j) z += std::exp(logits[r * c + j]);
    double want = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      const double target = (j == labels[r] ? 1.0 - eps : 0.0) + eps / c;
      want -= target * std::log(std::exp(logits[r * c + j]) / z);
      CHECK(probs[r * c + j] == Approx(std::exp(logits[r * c + j]) / z));
    }
    CHECK(loss[r] == Approx(want).epsilon(1e-12));
  }

  // Backward of mean(loss): dloss is one value read with stride 0, scaled by 1/rows.
  const double dmean = 1.0;
  cpu().cross_entropy_backward(DType::f64, probs.data(), labels.data(), &dmean, /*dloss_stride=*/0, 1.0 / rows,
                               dlogits.data(), rows, c, eps, nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < c; ++j) {
      const double target = (j == labels[r] ? 1.0 - eps : 0.0) + eps / c;
      CHECK(dlogits[r * c + j] == Approx((probs[r * c + j] - target) / rows).margin(1e-15));
    }
  }
}

TEST_CASE("cross_entropy: a label outside (0, c) is reported", "[kernels]") {
  std::vector<float> logits(3), loss(1);
  const int64_t label = 3;
  CHECK_THROWS_WITH(
      cpu().cross_entropy_forward(DType::f32, logits.data(), &label, loss.data(), nullptr, 1, 3, 0.0, nullptr),
      Catch::Contains("expected labels in [0, 3), got 3"));
}

TEST_CASE("philox: matches the Random123 known-answer vectors", "[kernels]") {
  using philox::Block;
  const Block zero = philox::philox4x32_10(Block{{0, 0, 0, 0}}, 0, 0);
  CHECK(zero.w[0] == 0x6627e8d5u);
  CHECK(zero.w[1] == 0xe169c58du);
  CHECK(zero.w[2] == 0xbc57ac4cu);
  CHECK(zero.w[3] == 0x9b00dbd8u);
  const Block pi =
      philox::philox4x32_10(Block{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  CHECK(pi.w[0] == 0xd16cfe09u);
  CHECK(pi.w[1] == 0x94fdccebu);
  CHECK(pi.w[2] == 0x5001e420u);
  CHECK(pi.w[3] == 0x24126ea1u);
}

TEST_CASE("random: the same seed and offset give the same numbers", "[kernels]") {
  const RandomKind kind = GENERATE(RandomKind::Uniform, RandomKind::Normal);
  std::vector<float> first(1000), second(1000), other_seed(1000);
  cpu().random(kind, DType::f32, first.data(), 1000, 42, 7, 0.0, 1.0, nullptr);
  cpu().random(kind, DType::f32, second.data(), 1000, 42, 7, 0.0, 1.0, nullptr);
  cpu().random(kind, DType::f32, other_seed.data(), 1000, 43, 7, 0.0, 1.0, nullptr);
  CHECK(first == second);
  CHECK(first != other_seed);
}

TEST_CASE("random: drawing (0, n) at once equals drawing (0, k) and (k, n)", "[kernels]") {
  const RandomKind kind = GENERATE(RandomKind::Uniform, RandomKind::Normal);
  const int64_t n = 1001, k = 377;
  const uint64_t offset = 123456789;
  std::vector<double> whole(n), split(n);
  cpu().random(kind, DType::f64, whole.data(), n, 5, offset, -2.0, 3.0, nullptr);
  cpu().random(kind, DType::f64, split.data(), k, 5, offset, -2.0, 3.0, nullptr);
  cpu().random(kind, DType::f64, split.data() + k, n - k, 5, offset + k, -2.0, 3.0, nullptr);
  CHECK(whole == split);
}

TEST_CASE("random: uniform stays in (a, b) and normal has the requested mean and spread", "[kernels]") {
  const int64_t n = 200000;
  std::vector<float> u(n), z(n);
  cpu().random(RandomKind::Uniform, DType::f32, u.data(), n, 1, 0, -1.0, 3.0, nullptr);
  cpu().random(RandomKind::Normal, DType::f32, z.data(), n, 1, 0, 2.0, 0.5, nullptr);
  double u_mean = 0.0, z_mean = 0.0, z_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    REQUIRE(u[i] >= -1.0f);
    REQUIRE(u[i] < 3.0f);
    u_mean += u[i];
    z_mean += z[i];
    z_sq += (z[i] - 2.0) * (z[i] - 2.0);
  }
  CHECK(u_mean / n == Approx(1.0).margin(0.02));
  CHECK(z_mean / n == Approx(2.0).margin(0.01));
  CHECK(std::sqrt(z_sq / n) == Approx(0.5).margin(0.01));
}

TEST_CASE("dropout: drops a fraction near p and scales the kept by 1/(1-p)", "[kernels]") {
  const int64_t n = 100000;
  const double p = 0.3;
  std::vector<float> x(n, 2.0f), y(n), mask(n);
  cpu().dropout(DType::f32, x.data(), y.data(), mask.data(), n, p, 99, 0, nullptr);
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (mask[i] == 0.0f) {
      ++dropped;
      CHECK(y[i] == 0.0f);
    } else {
      REQUIRE(mask[i] == Approx(1.0 / (1.0 - p)));
      REQUIRE(y[i] == Approx(2.0 / (1.0 - p)));
    }
  }
  // Binomial standard deviation sqrt(n p (1-p)) ~ 145: 0.01 n is about 7 of them.
  CHECK(static_cast<double>(dropped) / n == Approx(p).margin(0.01));
}

TEST_CASE("dtypes: the CPU kernels reject bfloat16 and float16, naming the kernel", "[kernels]") {
  std::vector<uint16_t> x(4), y(4);
  CHECK_THROWS_AS(cpu().unary(UnaryOp::Neg, DType::bf16, x.data(), y.data(), 4, 0.0, nullptr), Error);
  CHECK_THROWS_WITH(cpu().unary(UnaryOp::Neg, DType::bf16, x.data(), y.data(), 4, 0.0, nullptr),
                    "unary: the CPU backend supports float32 and float64, got bfloat16");
  CHECK_THROWS_WITH(cpu().unary(UnaryOp::Neg, DType::f16, x.data(), y.data(), 4, 0.0, nullptr),
                    "unary: the CPU backend supports float32 and float64, got float16");
  GemmArgs g;
  g.dtype = DType::i64;
  CHECK_THROWS_WITH(cpu().gemm(g, nullptr), Catch::StartsWith("gemm: the CPU backend supports float32 and float64"));
}

TEST_CASE("backend_for: a CUDA request names the op and says how to get CUDA", "[kernels]") {
  CHECK(std::string(backend_for(DeviceKind::CPU).name()) == "cpu");
  if (!built_with_cuda()) {
    CHECK_THROWS_WITH(backend_for(DeviceKind::CUDA, "tanh"),
                      "tanh: no CUDA backend in this program: it needs ringgrad configured with CUDA "
                      "(-DRINGGRAD_CUDA=ON) and the program linked with ringgrad::cuda (from find_package(ringgrad "
                      "COMPONENTS cuda), or add_subdirectory)");
  } else if (cuda_device_count() == 0) {
    CHECK_THROWS_WITH(backend_for(DeviceKind::CUDA, "tanh"),
                      Catch::StartsWith("tanh: no CUDA GPU is visible to this process"));
  } else {
    CHECK(std::string(backend_for(DeviceKind::CUDA, "tanh").name()) == "cuda");
  }
}

TEST_CASE("cpu backend: copy_between copies host bytes and refuses a GPU side", "[kernels]") {
  const std::vector<int64_t> src = {1, -2, 3, 1LL << 40};
  std::vector<int64_t> dst(4, 0);
  cpu().copy_between(DeviceKind::CPU, 0, src.data(), DeviceKind::CPU, 1, dst.data(), 32);
  CHECK(dst == src);
  cpu().copy_between(DeviceKind::CPU, 0, nullptr, DeviceKind::CPU, 0, nullptr, 0);  // nothing to copy
  CHECK_THROWS_WITH(cpu().copy_between(DeviceKind::CUDA, 0, src.data(), DeviceKind::CPU, 0, dst.data(), 8),
                    Catch::Contains("copy_between") && Catch::Contains("CUDA backend"));
  CHECK_THROWS_WITH(cpu().copy_between(DeviceKind::CPU, 0, src.data(), DeviceKind::CPU, 0, dst.data(), -1),
                    Catch::Contains("non-negative byte count, got -1"));
  CHECK(cpu().stream_for(0) == nullptr);  // CPU kernels run on the calling thread
}
