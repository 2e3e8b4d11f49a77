// tests/core/test_ops_forward.cpp: the forward values of every op against plain-loop references.
//
// gradcheck (test_grad_ops.cpp) proves that each backward matches its forward; these tests prove the
// forward itself computes the right function, in float64 (tight tolerance) and float32, on dense,
// transposed, narrowed and broadcast inputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <ringgrad/core/autograd/node.h>
#include <ringgrad/core/generator.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>

#include "kernels/cpu/thread_pool.h"

using namespace ringgrad;

namespace {

std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

void check_close(const Tensor& got, const std::vector<double>& expected, double tol = 1e-12) {
  REQUIRE(got.defined());
  const std::vector<double> v = values(got);
  REQUIRE(v.size() == expected.size());
  for (size_t i = 0; i < v.size(); ++i) {
    INFO("element " << i << " of " << v.size());
    CHECK(v[i] == Approx(expected[i]).margin(tol).epsilon(tol));
  }
}

// 0, 1, 2, ... scaled and shifted, as float64 in the given shape.
Tensor iota(const Shape& shape, double scale = 1.0, double shift = 0.0) {
  std::vector<double> v(shape.numel());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * scale + shift;
  return from_vector(v, shape);
}

double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Row-major [M, K] @ [K, N] in float64.
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k,
                               int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
  return c;
}

}  // namespace

// ============================================ binary ============================================

TEST_CASE("binary ops broadcast (3,1,5) with (4,1) to (3,4,5) with the right values", "[ops]") {
  const Tensor a = randn({3, 1, 5}, DType::f64, 1);
  const Tensor b = rand({4, 1}, DType::f64, 2) + 0.5;
  const std::vector<double> av = values(a), bv = values(b);
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> op;
    std::function<double(double, double)> ref;
  };
  const std::vector<Case> cases = {
      {"add", [](const Tensor& x, const Tensor& y) { return add(x, y); }, [](double x, double y) { return x + y; }},
      {"sub", [](const Tensor& x, const Tensor& y) { return sub(x, y); }, [](double x, double y) { return x - y; }},
      {"mul", [](const Tensor& x, const Tensor& y) { return mul(x, y); }, [](double x, double y) { return x * y; }},
      {"div", [](const Tensor& x, const Tensor& y) { return div(x, y); }, [](double x, double y) { return x / y; }},
      {"operator+", [](const Tensor& x, const Tensor& y) { return x + y; }, [](double x, double y) { return x + y; }},
      {"operator-", [](const Tensor& x, const Tensor& y) { return x - y; }, [](double x, double y) { return x - y; }},
      {"operator*", [](const Tensor& x, const Tensor& y) { return x * y; }, [](double x, double y) { return x * y; }},
      {"operator/", [](const Tensor& x, const Tensor& y) { return x / y; }, [](double x, double y) { return x / y; }},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const Tensor out = c.op(a, b);
    CHECK(out.shape() == Shape{3, 4, 5});
    CHECK(out.dtype() == DType::f64);
    std::vector<double> expected;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 5; ++k) expected.push_back(c.ref(av[i * 5 + k], bv[j]));
    check_close(out, expected);
    // Swapped operands broadcast the same way.
    std::vector<double> swapped;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 5; ++k) swapped.push_back(c.ref(bv[j], av[i * 5 + k]));
    check_close(c.op(b, a), swapped);
  }
}

TEST_CASE("binary ops on float32, on non-contiguous inputs and with a 0-d tensor", "[ops]") {
  const Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = from_vector<float>({10, 20, 30, 40, 50, 60}, {3, 2});
  const Tensor s = b.t() + a;  // [[11, 32, 53], [24, 45, 66]]
  CHECK(s.dtype() == DType::f32);
  CHECK(s.to_vector<float>() == std::vector<float>{11, 32, 53, 24, 45, 66});
  CHECK((a.narrow(1, 1, 2) * b.narrow(0, 1, 2)).to_vector<float>() == std::vector<float>{60, 120, 250, 360});
  CHECK((a * scalar_tensor(2.0)).to_vector<float>() == std::vector<float>{2, 4, 6, 8, 10, 12});
  CHECK((scalar_tensor(1.0) - a).shape() == Shape{2, 3});
}

TEST_CASE("broadcast_shapes aligns sizes from the right, sum_to reduces a gradient back", "[ops]") {
  CHECK(broadcast_shapes({3, 1, 5}, {4, 1}, "add") == Shape{3, 4, 5});
  CHECK(broadcast_shapes({5}, {3, 1}, "add") == Shape{3, 5});
  CHECK(broadcast_shapes({}, {2, 3}, "add") == Shape{2, 3});
  CHECK(broadcast_shapes({0, 1}, {1, 4}, "add") == Shape{0, 4});
  CHECK_THROWS_AS(broadcast_shapes({2, 3}, {4}, "add"), Error);

  const Tensor g = ones({3, 4, 5}, DType::f64);
  const Tensor r = sum_to(g, {4, 1});
  CHECK(r.shape() == Shape{4, 1});
  CHECK(values(r) == std::vector<double>(4, 15.0));
  CHECK(sum_to(g, {3, 1, 5}).shape() == Shape{3, 1, 5});
  CHECK(values(sum_to(g, {3, 1, 5})) == std::vector<double>(15, 4.0));
  CHECK(values(sum_to(g, {})) == std::vector<double>{60.0});
  CHECK(sum_to(g, {3, 4, 5}).shape() == Shape{3, 4, 5});
}

// ============================================ unary =============================================

TEST_CASE("unary ops match the C++ math library in float64 and float32", "[ops]") {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    std::function<double(double)> ref;
    bool positive_only;
  };
  const std::vector<Case> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, false},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, false},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, true},
      {"pow 2", [](const Tensor& x) { return pow(x, 2.0); }, [](double x) { return x * x; }, false},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0); }, [](double x) { return x * x * x; }, false},
      {"pow 2.5", [](const Tensor& x) { return pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); }, true},
      {"pow -1.5", [](const Tensor& x) { return pow(x, -1.5); }, [](double x) { return std::pow(x, -1.5); }, true},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, false},
      {"gelu erf", [](const Tensor& x) { return gelu(x); }, gelu_erf, false},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, GeluApproximate::Tanh); }, gelu_tanh, false},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, false},
      {"add scalar", [](const Tensor& x) { return add(x, 2.5); }, [](double x) { return x + 2.5; }, false},
      {"mul scalar", [](const Tensor& x) { return mul(x, -1.5); }, [](double x) { return x * -1.5; }, false},
      {"rdiv", [](const Tensor& x) { return rdiv(2.0, x); }, [](double x) { return 2.0 / x; }, true},
      {"x - s", [](const Tensor& x) { return x - 2.0; }, [](double x) { return x - 2.0; }, false},
      {"s - x", [](const Tensor& x) { return 2.0 - x; }, [](double x) { return 2.0 - x; }, false},
      {"x / s", [](const Tensor& x) { return x / 4.0; }, [](double x) { return x / 4.0; }, false},
      {"s / x", [](const Tensor& x) { return 4.0 / x; }, [](double x) { return 4.0 / x; }, true},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const Tensor x64 = c.positive_only ? rand({5, 7}, DType::f64, 3) * 3.0 + 0.1 : randn({5, 7}, DType::f64, 3) * 2.0;
    std::vector<double> expected = values(x64);
    for (double& v : expected) v = c.ref(v);
    const Tensor y64 = c.op(x64);
    CHECK(y64.dtype() == DType::f64);
    CHECK(y64.shape() == Shape{5, 7});
    check_close(y64, expected, 1e-12);

    const Tensor x32 = x64.to(DType::f32);
    std::vector<double> expected32 = values(x32);
    for (double& v : expected32) v = c.ref(v);
    const Tensor y32 = c.op(x32);
    CHECK(y32.dtype() == DType::f32);
    check_close(y32, expected32, 1e-5);

    // A transposed input gives the transposed result.
    std::vector<double> expected_t = values(x64.t());
    for (double& v : expected_t) v = c.ref(v);
    const Tensor yt = c.op(x64.t());
    CHECK(yt.shape() == Shape{7, 5});
    check_close(yt, expected_t, 1e-12);
  }
}

TEST_CASE("sigmoid, tanh, gelu and exp stay finite at large magnitudes", "[ops]") {
  const Tensor x = from_vector<double>({-1000.0, -50.0, 50.0, 1000.0});
  check_close(sigmoid(x), {0.0, sigmoid_ref(-50.0), 1.0, 1.0}, 1e-15);
  check_close(tanh(x), {-1.0, -1.0, 1.0, 1.0}, 1e-15);
  check_close(gelu(x), {0.0, 0.0, 50.0, 1000.0}, 1e-12);
  check_close(gelu(x, GeluApproximate::Tanh), {0.0, 0.0, 50.0, 1000.0}, 1e-12);
  const Tensor xf = x.to(DType::f32);
  for (double v : values(sigmoid(xf))) CHECK(std::isfinite(v));
  for (double v : values(tanh(xf))) CHECK(std::isfinite(v));
  CHECK(values(exp(from_vector<double>({-1000.0}))) == std::vector<double>{0.0});
}

TEST_CASE("silu: values and gradient match x s and s (1 + x (1 - s)), s = sigmoid(x), in float64 and float32",
          "[ops]") {
  const std::vector<double> xs = {-1000.0, -30.0, -3.5, -1.0, -0.25, 0.0, 0.125, 1.0, 2.75, 30.0, 1000.0};
  std::vector<double> y_ref, dy_ref;
  for (const double x : xs) {
    const double s = 1.0 / (1.0 + std::exp(-x));
    y_ref.push_back(x * s);
    dy_ref.push_back(s * (1.0 + x * (1.0 - s)));
  }
  for (const DType dt : {DType::f64, DType::f32}) {
    INFO(dtype_name(dt));
    const double tol = dt == DType::f64 ? 1e-14 : 1e-6;
    const Tensor x = from_vector<double>(xs).to(dt).requires_grad_(true);
    const Tensor y = silu(x);
    CHECK(y.dtype() == dt);
    check_close(y, y_ref, tol);
    REQUIRE(y.grad_fn());
    CHECK(std::string(y.grad_fn()->name()) == "SiluBackward");
    sum(y).backward();
    check_close(x.grad(), dy_ref, tol);
  }
}

// ========================================== reductions ==========================================

TEST_CASE("sum and mean over all elements and over dims, with and without keepdim", "[ops]") {
  const Tensor x = iota({3, 4, 5}, 0.5, -7.0);
  const std::vector<double> xv = values(x);
  auto at = [&](int i, int j, int k) { return xv[(i * 4 + j) * 5 + k]; };

  double total = 0;
  for (double v : xv) total += v;
  const Tensor s = sum(x);
  CHECK(s.dim() == 0);
  check_close(s, {total});
  check_close(mean(x), {total / 60.0});

  std::vector<double> over1;  // [3, 5]
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) {
      double acc = 0;
      for (int j = 0; j < 4; ++j) acc += at(i, j, k);
      over1.push_back(acc);
    }
  CHECK(sum(x, {1}).shape() == Shape{3, 5});
  CHECK(sum(x, {1}, true).shape() == Shape{3, 1, 5});
  check_close(sum(x, {1}), over1);
  check_close(sum(x, {-2}, true), over1);
  std::vector<double> mean1 = over1;
  for (double& v : mean1) v /= 4.0;
  check_close(mean(x, {1}), mean1);

  std::vector<double> over02;  // [4]
  for (int j = 0; j < 4; ++j) {
    double acc = 0;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 5; ++k) acc += at(i, j, k);
    over02.push_back(acc);
  }
  CHECK(sum(x, {0, 2}).shape() == Shape{4});
  CHECK(sum(x, {0, -1}, true).shape() == Shape{1, 4, 1});
  check_close(sum(x, {2, 0}), over02);
  std::vector<double> mean02 = over02;
  for (double& v : mean02) v /= 15.0;
  check_close(mean(x, {0, 2}, true), mean02);
  CHECK(mean(x, {0, 2}, true).shape() == Shape{1, 4, 1});

  std::vector<double> last;  // [3, 4]
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      double acc = 0;
      for (int k = 0; k < 5; ++k) acc += at(i, j, k);
      last.push_back(acc);
    }
  check_close(sum(x, {-1}), last);
  CHECK(sum(x, {0, 1, 2}).dim() == 0);
  check_close(sum(x, {0, 1, 2}), {total});
}

TEST_CASE("sum and mean of a non-contiguous input and in float32", "[ops]") {
  const Tensor x = iota({3, 5});
  check_close(sum(x.t(), {0}), {10, 35, 60});
  check_close(sum(x.t(), {1}), {15, 18, 21, 24, 27});
  check_close(sum(x.narrow(1, 1, 2), {1}), {3, 13, 23});
  const Tensor f = x.to(DType::f32);
  CHECK(sum(f).dtype() == DType::f32);
  check_close(sum(f), {105}, 1e-6);
  check_close(mean(f, {0}), {5, 6, 7, 8, 9}, 1e-6);
}

TEST_CASE("float32 sums of strided views: the bits of their contiguous copy, on 1 or 2 threads", "[ops][reduce]") {
  // kernels/cpu/sum_lanes.h: |result - s| <= u |s| + 22 u sum |x|, the same bits on any thread count.
  const int saved_threads = kernels::cpu::kernel_threads();
  const Tensor x = randn({301, 1703}, DType::f32, /*seed=*/5);
  const std::vector<Tensor> views = {x.t(), x.narrow(1, 3, 1699), x.narrow(0, 1, 300).t()};
  for (size_t v = 0; v < views.size(); ++v) {
    INFO("view " << v);
    const Tensor view = views[v];
    const std::vector<float> values = view.contiguous().to_vector<float>();
    double exact = 0, magnitude = 0;
    for (float e : values) exact += e, magnitude += std::fabs(e);
    set_num_threads(1);
    const float one = sum(view).item<float>();
    const std::vector<float> rows_one = sum(view, {1}).to_vector<float>();
    set_num_threads(2);
    const float two = sum(view).item<float>();
    const std::vector<float> rows_two = sum(view, {1}).to_vector<float>();
    set_num_threads(saved_threads);
    CHECK(one == two);  // no NaN here, so == compares the bits
    CHECK(rows_one == rows_two);
    CHECK(one == sum(view.contiguous()).item<float>());
    const double u = std::ldexp(1.0, -24);
    CHECK(std::fabs(double(one) - exact) <= u * std::fabs(exact) + 22 * u * magnitude);
  }
}

TEST_CASE("max over a dim returns the values and the index of the first maximum", "[ops]") {
  const Tensor x = from_vector<double>({1, 7, 3, 7, 9, -2, 4, 4, 0, 5, 5, 5}, {3, 4});
  auto [v1, i1] = max(x, 1);
  CHECK(v1.shape() == Shape{3});
  CHECK(i1.dtype() == DType::i64);
  check_close(v1, {7, 9, 5});
  CHECK(i1.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  auto [v0, i0] = max(x, 0, true);
  CHECK(v0.shape() == Shape{1, 4});
  check_close(v0, {9, 7, 5, 7});
  CHECK(i0.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 2, 0});
  CHECK(argmax(x, -1).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(argmax(x, 0, true).shape() == Shape{1, 4});
  CHECK(argmax(x.t(), 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 2, 0});
}

TEST_CASE("max: the gradient goes to the first maximum only", "[ops]") {
  Tensor x = from_vector<double>({1, 3, 3, 2}).requires_grad_(true);
  max(x, 0).first.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0});
}

// ============================================ matmul ============================================

TEST_CASE("matmul 2-D matches the naive product, in float64 and float32", "[ops]") {
  const Tensor a = randn({3, 5}, DType::f64, 10), b = randn({5, 4}, DType::f64, 11);
  const Tensor c = matmul(a, b);
  CHECK(c.shape() == Shape{3, 4});
  check_close(c, matmul_ref(values(a), values(b), 3, 5, 4), 1e-12);

  const Tensor af = randn({37, 53}, DType::f32, 12), bf = randn({53, 29}, DType::f32, 13);
  const Tensor cf = matmul(af, bf);
  CHECK(cf.dtype() == DType::f32);
  CHECK(cf.shape() == Shape{37, 29});
  check_close(cf, matmul_ref(values(af), values(bf), 37, 53, 29), 1e-4);
}

TEST_CASE("matmul with transposed, narrowed and one-element operands", "[ops]") {
  const Tensor a = randn({5, 3}, DType::f64, 14), b = randn({4, 5}, DType::f64, 15);
  const std::vector<double> at = values(a.t()), bt = values(b.t());
  check_close(matmul(a.t(), b.t()), matmul_ref(at, bt, 3, 5, 4));
  check_close(matmul(a.t(), b.t().contiguous()), matmul_ref(at, bt, 3, 5, 4));
  check_close(matmul(a.t().contiguous(), b.t()), matmul_ref(at, bt, 3, 5, 4));
  // b @ a: [4,5] @ [5,3]
  check_close(matmul(b, a), matmul_ref(values(b), values(a), 4, 5, 3));
  // A narrowed operand has a leading dimension larger than its width.
  const Tensor wide = randn({4, 7}, DType::f64, 16);
  const Tensor n = wide.narrow(1, 2, 3);  // [4, 3], row stride 7
  const Tensor r = randn({3, 6}, DType::f64, 17);
  check_close(matmul(n, r), matmul_ref(values(n), values(r), 4, 3, 6));
  const Tensor nr = randn({6, 9}, DType::f64, 18).narrow(1, 1, 5);  // [6, 5], row stride 9
  check_close(matmul(nr.t(), randn({6, 2}, DType::f64, 19)),
              matmul_ref(values(nr.t()), values(randn({6, 2}, DType::f64, 19)), 5, 6, 2));
  check_close(matmul(from_vector<double>({3.0}, {1, 1}), from_vector<double>({-2.0}, {1, 1})), {-6.0});
}

TEST_CASE("matmul batched 3-D and 3-D @ 2-D match per-batch products", "[ops]") {
  const Tensor a = randn({2, 3, 5}, DType::f64, 20), b = randn({2, 5, 4}, DType::f64, 21);
  const Tensor c = matmul(a, b);
  CHECK(c.shape() == Shape{2, 3, 4});
  std::vector<double> expected;
  for (int i = 0; i < 2; ++i) {
    const std::vector<double> ci = matmul_ref(values(a.select(0, i)), values(b.select(0, i)), 3, 5, 4);
    expected.insert(expected.end(), ci.begin(), ci.end());
  }
  check_close(c, expected);

  const Tensor w = randn({5, 4}, DType::f64, 22);
  const Tensor d = matmul(a, w);
  CHECK(d.shape() == Shape{2, 3, 4});
  std::vector<double> expected_d;
  for (int i = 0; i < 2; ++i) {
    const std::vector<double> di = matmul_ref(values(a.select(0, i)), values(w), 3, 5, 4);
    expected_d.insert(expected_d.end(), di.begin(), di.end());
  }
  check_close(d, expected_d);

  // Transposed inner matrices and a permuted batch dimension.
  const Tensor at = randn({2, 5, 3}, DType::f64, 23).transpose(1, 2);     // [2, 3, 5]
  const Tensor bp = randn({5, 2, 4}, DType::f64, 24).permute({1, 0, 2});  // [2, 5, 4]
  std::vector<double> expected_e;
  for (int i = 0; i < 2; ++i) {
    const std::vector<double> ei = matmul_ref(values(at.select(0, i)), values(bp.select(0, i)), 3, 5, 4);
    expected_e.insert(expected_e.end(), ei.begin(), ei.end());
  }
  check_close(matmul(at, bp), expected_e);
}

TEST_CASE("linear computes x W^T + b, for 2-D and 3-D x, with and without bias", "[ops]") {
  const Tensor x = randn({3, 5}, DType::f64, 25), w = randn({4, 5}, DType::f64, 26), b = randn({4}, DType::f64, 27);
  std::vector<double> xw = matmul_ref(values(x), values(w.t()), 3, 5, 4);
  check_close(linear(x, w), xw);
  std::vector<double> xwb = xw;
  const std::vector<double> bv = values(b);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) xwb[i * 4 + j] += bv[j];
  const Tensor y = linear(x, w, b);
  CHECK(y.shape() == Shape{3, 4});
  check_close(y, xwb);

  const Tensor x3 = randn({2, 3, 5}, DType::f64, 28);
  const Tensor y3 = linear(x3, w, b);
  CHECK(y3.shape() == Shape{2, 3, 4});
  std::vector<double> expected;
  for (int i = 0; i < 2; ++i) {
    std::vector<double> yi = matmul_ref(values(x3.select(0, i)), values(w.t()), 3, 5, 4);
    for (int r = 0; r < 3; ++r)
      for (int j = 0; j < 4; ++j) yi[r * 4 + j] += bv[j];
    expected.insert(expected.end(), yi.begin(), yi.end());
  }
  check_close(y3, expected);

  const Tensor xf = x.to(DType::f32), wf = w.to(DType::f32), bf = b.to(DType::f32);
  check_close(linear(xf, wf, bf), xwb, 1e-5);
}

// ===================================== joining and splitting ====================================

TEST_CASE("cat joins along a dim, stack adds a new one", "[ops]") {
  const Tensor a = iota({2, 3}), b = iota({1, 3}, 1.0, 10.0), c = iota({2, 2}, 1.0, 20.0);
  const Tensor r = cat({a, b}, 0);
  CHECK(r.shape() == Shape{3, 3});
  check_close(r, {0, 1, 2, 3, 4, 5, 10, 11, 12});
  const Tensor s = cat({a, c}, 1);
  CHECK(s.shape() == Shape{2, 5});
  check_close(s, {0, 1, 2, 20, 21, 3, 4, 5, 22, 23});
  check_close(cat({c, a}, -1), {20, 21, 0, 1, 2, 22, 23, 3, 4, 5});
  check_close(cat({a.t(), b.t()}, 1), {0, 3, 10, 1, 4, 11, 2, 5, 12});  // non-contiguous pieces

  const Tensor st = stack({a, a * 2.0}, 0);
  CHECK(st.shape() == Shape{2, 2, 3});
  check_close(st, {0, 1, 2, 3, 4, 5, 0, 2, 4, 6, 8, 10});
  const Tensor st1 = stack({a, a * 2.0}, 1);
  CHECK(st1.shape() == Shape{2, 2, 3});
  check_close(st1, {0, 1, 2, 0, 2, 4, 3, 4, 5, 6, 8, 10});
  const Tensor stl = stack({a, a * 2.0}, -1);
  CHECK(stl.shape() == Shape{2, 3, 2});
  check_close(stl, {0, 0, 1, 2, 2, 4, 3, 6, 4, 8, 5, 10});
}

TEST_CASE("split and chunk: uneven pieces, last one smaller", "[ops]") {
  const Tensor x = iota({7, 3});
  const std::vector<Tensor> p = split(x, 3, 0);
  REQUIRE(p.size() == 3);
  CHECK(p[0].shape() == Shape{3, 3});
  CHECK(p[1].shape() == Shape{3, 3});
  CHECK(p[2].shape() == Shape{1, 3});
  check_close(p[2], {18, 19, 20});
  check_close(p[1], {9, 10, 11, 12, 13, 14, 15, 16, 17});

  const Tensor y = iota({3, 7});
  const std::vector<Tensor> c = chunk(y, 3, 1);
  REQUIRE(c.size() == 3);
  CHECK(c[0].shape() == Shape{3, 3});
  CHECK(c[2].shape() == Shape{3, 1});
  check_close(c[2], {6, 13, 20});
  check_close(c[1], {3, 4, 5, 10, 11, 12, 17, 18, 19});

  const std::vector<Tensor> q = split(y, 2, -1);
  REQUIRE(q.size() == 4);
  CHECK(q[3].shape() == Shape{3, 1});
  // PyTorch's chunk: pieces of ceil(n / chunks), so 6 rows in 4 chunks come back as 3 pieces of 2.
  const std::vector<Tensor> c4 = chunk(iota({6}), 4, 0);
  REQUIRE(c4.size() == 3);
  CHECK(c4[2].shape() == Shape{2});
}

// ====================================== softmax and losses ======================================

TEST_CASE("softmax and log_softmax match the reference over dim -1, dim 0 and a middle dim", "[ops]") {
  const Tensor x = randn({3, 5}, DType::f64, 30) * 3.0;
  const std::vector<double> xv = values(x);
  std::vector<double> sm_last(15), sm_first(15);
  for (int i = 0; i < 3; ++i) {
    double z = 0;
    for (int j = 0; j < 5; ++j) z += std::exp(xv[i * 5 + j]);
    for (int j = 0; j < 5; ++j) sm_last[i * 5 + j] = std::exp(xv[i * 5 + j]) / z;
  }
  for (int j = 0; j < 5; ++j) {
    double z = 0;
    for (int i = 0; i < 3; ++i) z += std::exp(xv[i * 5 + j]);
    for (int i = 0; i < 3; ++i) sm_first[i * 5 + j] = std::exp(xv[i * 5 + j]) / z;
  }
  check_close(softmax(x, -1), sm_last);
  check_close(softmax(x, 1), sm_last);
  check_close(softmax(x, 0), sm_first);
  std::vector<double> log_last = sm_last, log_first = sm_first;
  for (double& v : log_last) v = std::log(v);
  for (double& v : log_first) v = std::log(v);
  check_close(log_softmax(x, -1), log_last, 1e-11);
  check_close(log_softmax(x, 0), log_first, 1e-11);
  check_close(softmax(x.t(), 0), values(softmax(x, 1).t()));
  check_close(softmax(x.to(DType::f32), -1), sm_last, 1e-6);

  const Tensor y = randn({2, 3, 4}, DType::f64, 31);
  const std::vector<double> s = values(softmax(y, 1));
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 4; ++c) {
      double total = 0;
      for (int b = 0; b < 3; ++b) total += s[(a * 3 + b) * 4 + c];
      CHECK(total == Approx(1.0).epsilon(1e-12));
    }
}

TEST_CASE("softmax and log_softmax are stable for large inputs", "[ops]") {
  const Tensor x = from_vector<double>({1000.0, 1001.0, 999.0, -1000.0}, {1, 4});
  const double z = std::exp(0.0) + std::exp(1.0) + std::exp(-1.0);
  check_close(softmax(x, -1), {1.0 / z, std::exp(1.0) / z, std::exp(-1.0) / z, 0.0}, 1e-12);
  check_close(log_softmax(x, -1), {-std::log(z), 1.0 - std::log(z), -1.0 - std::log(z), -2000.0 - std::log(z)}, 1e-9);
  for (double v : values(softmax(x.to(DType::f32), -1))) CHECK(std::isfinite(v));
  for (double v : values(log_softmax(x.to(DType::f32), -1))) CHECK(std::isfinite(v));
}

TEST_CASE("cross_entropy matches log-sum-exp minus the label logit, incl. label smoothing", "[ops]") {
  const Tensor logits = randn({5, 7}, DType::f64, 32) * 2.0;
  const std::vector<int64_t> lv = {0, 6, 3, 3, 1};
  const Tensor labels = from_vector<int64_t>(lv);
  const std::vector<double> xv = values(logits);
  auto per_row = [&](double eps) {
    std::vector<double> loss(5);
    for (int r = 0; r < 5; ++r) {
      double mx = -1e300, mean_x = 0;
      for (int c = 0; c < 7; ++c) {
        mx = std::max(mx, xv[r * 7 + c]);
        mean_x += xv[r * 7 + c] / 7.0;
      }
      double z = 0;
      for (int c = 0; c < 7; ++c) z += std::exp(xv[r * 7 + c] - mx);
      const double lse = mx + std::log(z);
      loss[r] = lse - (1.0 - eps) * xv[r * 7 + lv[r]] - eps * mean_x;
    }
    return loss;
  };
  for (double eps : {0.0, 0.1}) {
    INFO("label_smoothing " << eps);
    const std::vector<double> loss = per_row(eps);
    double total = 0;
    for (double v : loss) total += v;
    const Tensor none = cross_entropy(logits, labels, Reduction::None, eps);
    CHECK(none.shape() == Shape{5});
    check_close(none, loss, 1e-12);
    const Tensor s = cross_entropy(logits, labels, Reduction::Sum, eps);
    CHECK(s.dim() == 0);
    check_close(s, {total}, 1e-12);
    check_close(cross_entropy(logits, labels, Reduction::Mean, eps), {total / 5.0}, 1e-12);
    check_close(cross_entropy(logits.to(DType::f32), labels, Reduction::Mean, eps), {total / 5.0}, 1e-5);
  }
  check_close(cross_entropy(logits, labels), {[&] {
                double t = 0;
                for (double v : per_row(0.0)) t += v;
                return t / 5.0;
              }()});
}

TEST_CASE("cross_entropy: the gradient is (softmax - onehot) / N", "[ops]") {
  Tensor logits = randn({3, 4}, DType::f64, 33).requires_grad_(true);
  const Tensor labels = from_vector<int64_t>({3, 0, 2});
  cross_entropy(logits, labels).backward();
  std::vector<double> expected = values(softmax(logits.detach(), 1));
  const std::vector<int64_t> lv = {3, 0, 2};
  for (int r = 0; r < 3; ++r) expected[r * 4 + lv[r]] -= 1.0;
  for (double& v : expected) v /= 3.0;
  check_close(logits.grad(), expected, 1e-12);
}

TEST_CASE("mse_loss is the mean, sum or elementwise squared difference", "[ops]") {
  const Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = from_vector<double>({1, 0, 6, 4, 7, 2}, {2, 3});
  // differences 0, 2, -3, 0, -2, 4 -> squares 0, 4, 9, 0, 4, 16
  check_close(mse_loss(a, b), {33.0 / 6.0});
  check_close(mse_loss(a, b, Reduction::Sum), {33.0});
  const Tensor none = mse_loss(a, b, Reduction::None);
  CHECK(none.shape() == Shape{2, 3});
  check_close(none, {0, 4, 9, 0, 4, 16});
  check_close(mse_loss(a.to(DType::f32), b.to(DType::f32)), {5.5}, 1e-6);
}

TEST_CASE("dropout zeroes about p of the elements and scales the rest by 1/(1-p)", "[ops]") {
  const int64_t n = 20001;
  const double p = 0.3;
  Generator g(7);
  const Tensor y = dropout(ones({n}, DType::f64), p, true, g);
  int64_t zeros_seen = 0;
  for (double v : values(y)) {
    if (v == 0.0) {
      ++zeros_seen;
    } else {
      REQUIRE(v == Approx(1.0 / (1.0 - p)).epsilon(1e-12));
    }
  }
  CHECK(static_cast<double>(zeros_seen) / n == Approx(p).margin(0.02));
}

TEST_CASE("dropout: same generator state, same mask, the gradient is the mask", "[ops]") {
  Generator g1(8), g2(8);
  const Tensor x = rand({5, 7}, DType::f64, 9) + 1.0;
  const std::vector<double> a = values(dropout(x, 0.5, true, g1));
  CHECK(a == values(dropout(x, 0.5, true, g2)));
  CHECK(values(dropout(x, 0.5, true, g1)) != a);  // g1 moved on

  Tensor xl = ones({5, 7}, DType::f64).requires_grad_(true);
  Generator g3(8);
  sum(dropout(xl, 0.5, true, g3)).backward();
  Generator g4(8);
  CHECK(values(xl.grad()) == values(dropout(ones({5, 7}, DType::f64), 0.5, true, g4)));

  manual_seed(10);
  const std::vector<double> d1 = values(dropout(x, 0.4));
  manual_seed(10);
  CHECK(values(dropout(x, 0.4)) == d1);
}

TEST_CASE("dropout in eval mode, or with p = 0, is the identity", "[ops]") {
  const Tensor x = randn({5, 7}, DType::f64, 11);
  Generator g(12);
  CHECK(values(dropout(x, 0.5, false, g)) == values(x));
  CHECK(values(dropout(x, 0.0, true, g)) == values(x));
  CHECK(values(dropout(x.t(), 0.5, false, g)) == values(x.t()));
}
