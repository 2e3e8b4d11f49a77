// tests/core/test_grad_ops.cpp: every differentiable op and view against central finite differences.
//
// gradcheck runs in float64 (eps = 1e-6, |analytic - numeric| <= 1e-5 + 1e-3 |numeric|). Sizes are odd
// and non-square so that a swapped dimension or a wrong stride cannot go unnoticed; inputs stay away
// from kinks (ReLU at 0, ties in max) where the finite difference is not the derivative.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <vector>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/autograd/node.h>
#include <ringgrad/core/generator.h>
#include <ringgrad/core/gradcheck.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>

#include "test_util.h"

using namespace ringgrad;

namespace {

using Inputs = std::vector<Tensor>;

// A float64 standard-normal leaf that requires grad.
Tensor leaf(const Shape& shape, uint64_t seed) { return randn(shape, DType::f64, seed).requires_grad_(true); }

// Values in [lo, lo + 1): for log, sqrt, fractional powers and denominators.
Tensor positive_leaf(const Shape& shape, uint64_t seed, double lo = 0.5) {
  Tensor t = rand(shape, DType::f64, seed) + lo;
  return t.requires_grad_(true);
}

// Standard-normal values pushed at least 0.05 away from 0, the kink of relu.
Tensor away_from_zero_leaf(const Shape& shape, uint64_t seed) {
  std::vector<double> v = randn(shape, DType::f64, seed).to_vector<double>();
  for (double& x : v)
    if (std::abs(x) < 0.05) x = x < 0 ? -0.05 : 0.05;
  Tensor t = from_vector(v, shape);
  return t.requires_grad_(true);
}

// Distinct values 0.37 apart in a scrambled order, so every max is unique and stays so under eps.
Tensor distinct_leaf(const Shape& shape) {
  const int64_t n = shape.numel();
  const int64_t mult = 11;
  REQUIRE(std::gcd(mult, n) == 1);
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * mult) % n) * 0.37 - 1.0;
  Tensor t = from_vector(v, shape);
  return t.requires_grad_(true);
}

// A transposed leaf: shape [3, 5], strides [1, 3] -- not contiguous.
Tensor transposed_leaf(uint64_t seed) {
  Tensor t = randn({5, 3}, DType::f64, seed).transpose(0, 1).detach();
  return t.requires_grad_(true);
}

// A narrowed leaf: shape [4, 3] inside a [4, 7] buffer, offset 2 -- not contiguous.
Tensor narrowed_leaf(uint64_t seed) {
  Tensor t = randn({4, 7}, DType::f64, seed).narrow(1, 2, 3).detach();
  return t.requires_grad_(true);
}

}  // namespace

// =========================================== gradcheck ==========================================

namespace {

// y = 2x with a deliberately wrong backward (3 instead of 2): gradcheck must catch it.
struct WrongDoubleBackward final : Node {
  const char* name() const override { return "WrongDoubleBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override { return {grad_outputs[0] * 3.0}; }
};

Tensor wrong_double(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x * 2.0;
  }
  if (needs_grad(x)) record<WrongDoubleBackward>(y, {x});
  return y;
}

}  // namespace

TEST_CASE("gradcheck: a wrong backward fails and the report names the input and element", "[grad]") {
  const GradcheckResult dense = gradcheck(wrong_double, leaf({3, 5}, 200));
  CHECK_FALSE(dense.ok);
  CHECK_FALSE(dense.report.empty());
  INFO(dense.report);
  const GradcheckResult strided = gradcheck(wrong_double, transposed_leaf(201));
  CHECK_FALSE(strided.ok);
  // A wrong gradient of the second input only is caught too.
  const GradcheckResult second =
      gradcheck([](const Inputs& in) { return in[0] + wrong_double(in[1]); }, {leaf({2, 3}, 202), leaf({2, 3}, 203)});
  CHECK_FALSE(second.ok);
}

TEST_CASE("gradcheck: the tolerances in GradcheckOptions are honoured", "[grad]") {
  GradcheckOptions loose;
  loose.rtol() = 1.0;  // |3 - 2| <= 1e-5 + 1.0 * 2
  CHECK(gradcheck(wrong_double, leaf({3, 5}, 204), loose).ok);
}

// ============================================ binary ============================================

TEST_CASE("add: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return add(in[0], in[1]); }, {leaf({3, 5}, 1), leaf({3, 5}, 2)});
}

TEST_CASE("add: broadcasting (3,1,5) with (4,1) sums the gradient back to each shape", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return add(in[0], in[1]); }, {leaf({3, 1, 5}, 3), leaf({4, 1}, 4)});
}

TEST_CASE("sub: gradient matches finite differences, with broadcasting", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return sub(in[0], in[1]); }, {leaf({3, 5}, 5), leaf({3, 5}, 6)});
  CHECK_GRADCHECK([](const Inputs& in) { return sub(in[0], in[1]); }, {leaf({3, 1, 5}, 7), leaf({4, 1}, 8)});
  CHECK_GRADCHECK([](const Inputs& in) { return sub(in[0], in[1]); }, {leaf({4, 1}, 9), leaf({3, 1, 5}, 10)});
}

TEST_CASE("mul: gradient matches finite differences, with broadcasting", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return mul(in[0], in[1]); }, {leaf({3, 5}, 11), leaf({3, 5}, 12)});
  CHECK_GRADCHECK([](const Inputs& in) { return mul(in[0], in[1]); }, {leaf({3, 1, 5}, 13), leaf({4, 1}, 14)});
}

TEST_CASE("div: gradient matches finite differences, with broadcasting", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return div(in[0], in[1]); }, {leaf({3, 5}, 15), positive_leaf({3, 5}, 16)});
  CHECK_GRADCHECK([](const Inputs& in) { return div(in[0], in[1]); }, {leaf({3, 1, 5}, 17), positive_leaf({4, 1}, 18)});
}

TEST_CASE("binary ops: a 0-d tensor broadcasts against any shape", "[grad]") {
  Tensor s = scalar_tensor(1.7, DType::f64);
  s.requires_grad_(true);
  CHECK_GRADCHECK([](const Inputs& in) { return mul(in[0], in[1]); }, {leaf({3, 5}, 19), s});
  CHECK_GRADCHECK([](const Inputs& in) { return add(in[0], in[1]); }, {s, leaf({2, 3, 5}, 20)});
}

TEST_CASE("binary ops: one input used twice gets both contributions", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return mul(t, t); }, leaf({3, 5}, 21));
  CHECK_GRADCHECK([](const Tensor& t) { return sub(mul(t, t), div(t, add(t, 3.0))); }, positive_leaf({5, 3}, 22));
}

TEST_CASE("binary operators +, -, *, / between tensors: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return in[0] + in[1] * in[2] - in[1] / in[2]; },
                  {leaf({3, 5}, 23), leaf({1, 5}, 24), positive_leaf({3, 1}, 25)});
}

TEST_CASE("scalar ops add/mul/rdiv: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return add(t, 2.5); }, leaf({3, 5}, 26));
  CHECK_GRADCHECK([](const Tensor& t) { return mul(t, -1.5); }, leaf({3, 5}, 27));
  CHECK_GRADCHECK([](const Tensor& t) { return rdiv(2.0, t); }, positive_leaf({3, 5}, 28));
}

TEST_CASE("scalar operators on both sides: gradient matches finite differences", "[grad]") {
  const Tensor x = positive_leaf({3, 5}, 29);
  CHECK_GRADCHECK([](const Tensor& t) { return t + 2.0; }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return 2.0 + t; }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return t - 2.0; }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return 2.0 - t; }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return t * 3.0; }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return 3.0 * t; }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return t / 4.0; }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return 4.0 / t; }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return -t; }, x);
}

// ============================================ unary =============================================

TEST_CASE("neg: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return neg(t); }, leaf({3, 5}, 30));
}

TEST_CASE("exp: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return exp(t); }, leaf({3, 5}, 31));
}

TEST_CASE("log: gradient matches finite differences on positive inputs", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return log(t); }, positive_leaf({3, 5}, 32));
}

TEST_CASE("sqrt: gradient matches finite differences on positive inputs", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return sqrt(t); }, positive_leaf({3, 5}, 33));
}

TEST_CASE("pow: gradient matches finite differences for integer, fractional and negative exponents", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return pow(t, 2.0); }, leaf({3, 5}, 34));
  CHECK_GRADCHECK([](const Tensor& t) { return pow(t, 3.0); }, leaf({3, 5}, 35));
  CHECK_GRADCHECK([](const Tensor& t) { return pow(t, 0.5); }, positive_leaf({3, 5}, 36));
  CHECK_GRADCHECK([](const Tensor& t) { return pow(t, 2.5); }, positive_leaf({3, 5}, 37));
  CHECK_GRADCHECK([](const Tensor& t) { return pow(t, -1.5); }, positive_leaf({3, 5}, 38));
}

TEST_CASE("relu: gradient matches finite differences away from 0", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return relu(t); }, away_from_zero_leaf({5, 7}, 39));
}

TEST_CASE("gelu (exact, erf): gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return gelu(t, GeluApproximate::None); }, leaf({3, 5}, 40));
}

TEST_CASE("gelu (tanh approximation): gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return gelu(t, GeluApproximate::Tanh); }, leaf({3, 5}, 41));
}

TEST_CASE("tanh: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return tanh(t); }, leaf({3, 5}, 42));
}

TEST_CASE("sigmoid: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return sigmoid(t); }, leaf({3, 5}, 43));
}

TEST_CASE("silu: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return silu(t); }, leaf({3, 5}, 45));
  // Wider inputs reach both tails, where s -> 0 and s -> 1.
  CHECK_GRADCHECK([](const Tensor& t) { return silu(t * 4.0); }, leaf({4, 7}, 46));
}

TEST_CASE("unary ops: a chain of ops composes the gradients", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return sigmoid(tanh(exp(t) * 0.3) + sqrt(t)) / log(t + 1.0); },
                  positive_leaf({5, 3}, 44));
}

// ========================================== reductions ==========================================

TEST_CASE("sum over all elements: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return sum(t); }, leaf({3, 5}, 45));
  CHECK_GRADCHECK([](const Tensor& t) { return sum(t); }, leaf({2, 3, 5}, 46));
}

TEST_CASE("sum over dims, with and without keepdim: gradient matches finite differences", "[grad]") {
  const Tensor x = leaf({3, 4, 5}, 47);
  CHECK_GRADCHECK([](const Tensor& t) { return sum(t, {1}); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return sum(t, {1}, true); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return sum(t, {-1}); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return sum(t, {-1}, true); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return sum(t, {0, 2}); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return sum(t, {0, -1}, true); }, x);
}

TEST_CASE("mean over all elements: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return mean(t); }, leaf({3, 5}, 48));
}

TEST_CASE("mean over dims, with and without keepdim: gradient matches finite differences", "[grad]") {
  const Tensor x = leaf({3, 4, 5}, 49);
  CHECK_GRADCHECK([](const Tensor& t) { return mean(t, {0}); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return mean(t, {2}, true); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return mean(t, {-2}); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return mean(t, {1, 2}); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return mean(t, {-3, -1}, true); }, x);
}

TEST_CASE("max over a dim: gradient flows to the unique maximum", "[grad]") {
  const Tensor x = distinct_leaf({3, 4, 5});
  CHECK_GRADCHECK([](const Tensor& t) { return max(t, 1).first; }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return max(t, 0, true).first; }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return max(t, -1).first; }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return max(t, 2, true).first; }, x);
}

// ============================================ matmul ============================================

TEST_CASE("matmul 2-D (3x5 @ 5x4): gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0], in[1]); }, {leaf({3, 5}, 50), leaf({5, 4}, 51)});
}

TEST_CASE("matmul batched 3-D (2x3x5 @ 2x5x4): gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0], in[1]); }, {leaf({2, 3, 5}, 52), leaf({2, 5, 4}, 53)});
}

TEST_CASE("matmul 3-D @ 2-D (2x3x5 @ 5x4): the 2-D operand's gradient sums over the batch", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0], in[1]); }, {leaf({2, 3, 5}, 54), leaf({5, 4}, 55)});
}

TEST_CASE("matmul broadcasts batch dims as PyTorch's: gradients sum over the broadcast dims", "[grad]") {
  auto mm = [](const Inputs& in) { return matmul(in[0], in[1]); };
  // Attention's shapes: (batch, heads, T, d) @ (batch, heads, d, T), the second a transposed view.
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0], in[1].transpose(-1, -2)); },
                  {leaf({2, 3, 4, 5}, 70), leaf({2, 3, 4, 5}, 71)});
  CHECK_GRADCHECK(mm, {leaf({2, 1, 3, 5}, 72), leaf({3, 5, 4}, 73)});  // a broadcast along one batch dim only
  CHECK_GRADCHECK(mm, {leaf({3, 5}, 74), leaf({2, 5, 4}, 75)});        // a shared by every batch entry
  CHECK_GRADCHECK(mm, {leaf({2, 3, 2, 5}, 76), leaf({5, 4}, 77)});     // b shared, the batch folded into rows
  CHECK_GRADCHECK(mm, {leaf({5}, 78), leaf({2, 5, 4}, 79)});           // a vector: a row, dropped again
  CHECK_GRADCHECK(mm, {leaf({2, 3, 5}, 80), leaf({5}, 81)});           // b a vector: a column
  CHECK_GRADCHECK(mm, {leaf({5}, 82), leaf({5}, 83)});                 // a dot product: a scalar
  CHECK_GRADCHECK([](const Inputs& in) { return bmm(in[0], in[1]); }, {leaf({2, 3, 5}, 84), leaf({2, 5, 4}, 85)});
}

TEST_CASE("matmul with broadcast batch dims equals the products of its matrices one by one", "[grad]") {
  const Tensor a = randn({2, 1, 3, 5}, DType::f64, 90), b = randn({4, 5, 2}, DType::f64, 91);
  const Tensor c = matmul(a, b);
  REQUIRE(c.shape() == Shape{2, 4, 3, 2});
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      const std::vector<double> got = c.select(0, i).select(0, j).contiguous().to_vector<double>();
      const std::vector<double> want = matmul(a.select(0, i).select(0, 0), b.select(0, j)).to_vector<double>();
      REQUIRE(got.size() == want.size());
      for (size_t e = 0; e < got.size(); ++e) CHECK(std::abs(got[e] - want[e]) < 1e-12);
    }
  }
  CHECK(matmul(randn({5}, DType::f64, 92), randn({5}, DType::f64, 93)).dim() == 0);
  CHECK(matmul(randn({5}, DType::f64, 94), randn({2, 5, 3}, DType::f64, 95)).shape() == Shape{2, 3});
  CHECK(matmul(randn({2, 3, 5}, DType::f64, 96), randn({5}, DType::f64, 97)).shape() == Shape{2, 3});
}

TEST_CASE("matmul with transposed (non-contiguous) operands: gradient matches finite differences", "[grad]") {
  // Transposes taken inside the function (the GEMM sees trans flags) ...
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0].t(), in[1]); }, {leaf({5, 3}, 56), leaf({5, 4}, 57)});
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0], in[1].t()); }, {leaf({3, 5}, 58), leaf({4, 5}, 59)});
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0].t(), in[1].t()); }, {leaf({5, 3}, 60), leaf({4, 5}, 61)});
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0].transpose(1, 2), in[1]); },
                  {leaf({2, 5, 3}, 62), leaf({2, 5, 4}, 63)});
  // ... and leaves that are themselves transposed views.
  Tensor a = transposed_leaf(64);  // [3, 5]
  Tensor b = randn({4, 5}, DType::f64, 65).t().detach();
  b.requires_grad_(true);  // [5, 4], strides [1, 5]
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0], in[1]); }, {a, b});
}

TEST_CASE("matmul with narrowed (non-contiguous) operands: gradient matches finite differences", "[grad]") {
  Tensor a = narrowed_leaf(66);  // [4, 3]
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0], in[1]); }, {a, leaf({3, 5}, 67)});
}

TEST_CASE("matmul of one-element matrices: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0], in[1]); }, {leaf({1, 1}, 68), leaf({1, 1}, 69)});
  CHECK_GRADCHECK([](const Inputs& in) { return matmul(in[0], in[1]); }, {leaf({1, 5}, 70), leaf({5, 1}, 71)});
}

TEST_CASE("linear with bias: gradient matches finite differences for x, weight and bias", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return linear(in[0], in[1], in[2]); },
                  {leaf({3, 5}, 72), leaf({4, 5}, 73), leaf({4}, 74)});
}

TEST_CASE("linear without bias: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return linear(in[0], in[1]); }, {leaf({3, 5}, 75), leaf({4, 5}, 76)});
}

TEST_CASE("linear on a 3-D input: weight and bias gradients sum over all leading dims", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return linear(in[0], in[1], in[2]); },
                  {leaf({2, 3, 5}, 77), leaf({4, 5}, 78), leaf({4}, 79)});
  CHECK_GRADCHECK([](const Inputs& in) { return linear(in[0], in[1]); }, {leaf({2, 3, 5}, 80), leaf({4, 5}, 81)});
}

TEST_CASE("linear with a transposed input and weight: gradient matches finite differences", "[grad]") {
  Tensor w = randn({5, 4}, DType::f64, 82).t().detach();
  w.requires_grad_(true);  // [4, 5], not contiguous
  CHECK_GRADCHECK([](const Inputs& in) { return linear(in[0], in[1], in[2]); },
                  {transposed_leaf(83), w, leaf({4}, 84)});
}

// ===================================== joining and splitting ====================================

TEST_CASE("cat: gradient matches finite differences along dim 0, dim 1 and dim -1", "[grad]") {
  CHECK_GRADCHECK([](const Inputs& in) { return cat({in[0], in[1]}, 0); }, {leaf({2, 3}, 85), leaf({4, 3}, 86)});
  CHECK_GRADCHECK(
      [](const Inputs& in) {
        return cat({in[0], in[1], in[2]}, 1);
      },
      {leaf({3, 2}, 87), leaf({3, 4}, 88), leaf({3, 1}, 89)});
  CHECK_GRADCHECK([](const Inputs& in) { return cat({in[0], in[1]}, -1); }, {leaf({2, 3, 1}, 90), leaf({2, 3, 4}, 91)});
}

TEST_CASE("cat: one input used twice gets both gradients", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return cat({t, t * 2.0}, 0); }, leaf({3, 5}, 92));
}

TEST_CASE("stack: gradient matches finite differences along dim 0, dim 1 and dim -1", "[grad]") {
  const Tensor a = leaf({3, 5}, 93), b = leaf({3, 5}, 94), c = leaf({3, 5}, 95);
  CHECK_GRADCHECK([](const Inputs& in) { return stack(in, 0); }, {a, b, c});
  CHECK_GRADCHECK([](const Inputs& in) { return stack(in, 1); }, {a, b, c});
  CHECK_GRADCHECK([](const Inputs& in) { return stack(in, -1); }, {a, b});
}

TEST_CASE("split: uneven pieces each route their gradient back", "[grad]") {
  // [7, 3] split by 3 along dim 0: pieces of 3, 3 and 1 rows, scaled differently so a mixed-up
  // routing shows.
  CHECK_GRADCHECK(
      [](const Tensor& t) {
        std::vector<Tensor> p = split(t, 3, 0);
        return cat({p[0] * 1.0, p[1] * 2.0, p[2] * 3.0}, 0);
      },
      leaf({7, 3}, 96));
  CHECK_GRADCHECK(
      [](const Tensor& t) {
        std::vector<Tensor> p = split(t, 2, 1);
        return cat({p[2] * 5.0, p[0], p[1] * -1.0}, 1);
      },
      leaf({3, 5}, 97));
}

TEST_CASE("split: pieces that are not used get zero gradient", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return exp(split(t, 3, 0)[1]); }, leaf({7, 3}, 98));
}

TEST_CASE("chunk: uneven chunks each route their gradient back", "[grad]") {
  // [3, 7] in 3 chunks along dim 1: 3, 3 and 1 columns.
  CHECK_GRADCHECK(
      [](const Tensor& t) {
        std::vector<Tensor> p = chunk(t, 3, 1);
        return cat({tanh(p[0]), p[1] * p[1], p[2] * 4.0}, 1);
      },
      leaf({3, 7}, 99));
  CHECK_GRADCHECK([](const Tensor& t) { return chunk(t, 2, 0)[1] * 3.0; }, leaf({5, 3}, 100));
}

// ====================================== softmax and losses ======================================

TEST_CASE("softmax: gradient matches finite differences over dim -1 and dim 0", "[grad]") {
  const Tensor x = leaf({3, 5}, 101);
  CHECK_GRADCHECK([](const Tensor& t) { return softmax(t, -1); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return softmax(t, 0); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return softmax(t, 1); }, leaf({2, 3, 4}, 102));
}

TEST_CASE("log_softmax: gradient matches finite differences over dim -1 and dim 0", "[grad]") {
  const Tensor x = leaf({3, 5}, 103);
  CHECK_GRADCHECK([](const Tensor& t) { return log_softmax(t, -1); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return log_softmax(t, 0); }, x);
  CHECK_GRADCHECK([](const Tensor& t) { return log_softmax(t, 1); }, leaf({2, 3, 4}, 104));
}

TEST_CASE("softmax and log_softmax: gradient matches finite differences on non-contiguous input", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return softmax(t, -1); }, transposed_leaf(105));
  CHECK_GRADCHECK([](const Tensor& t) { return log_softmax(t, 1); }, narrowed_leaf(106));
}

TEST_CASE("cross_entropy: gradient matches finite differences for mean, sum and none", "[grad]") {
  const Tensor labels = from_vector<int64_t>({0, 6, 3, 3, 1});
  const Tensor logits = leaf({5, 7}, 107);
  CHECK_GRADCHECK([&](const Tensor& t) { return cross_entropy(t, labels, Reduction::Mean); }, logits);
  CHECK_GRADCHECK([&](const Tensor& t) { return cross_entropy(t, labels, Reduction::Sum); }, logits);
  CHECK_GRADCHECK([&](const Tensor& t) { return cross_entropy(t, labels, Reduction::None); }, logits);
}

TEST_CASE("cross_entropy with label smoothing: gradient matches finite differences", "[grad]") {
  const Tensor labels = from_vector<int64_t>({2, 0, 4});
  const Tensor logits = leaf({3, 5}, 108);
  CHECK_GRADCHECK([&](const Tensor& t) { return cross_entropy(t, labels, Reduction::Mean, 0.1); }, logits);
  CHECK_GRADCHECK([&](const Tensor& t) { return cross_entropy(t, labels, Reduction::Sum, 0.25); }, logits);
  CHECK_GRADCHECK([&](const Tensor& t) { return cross_entropy(t, labels, Reduction::None, 0.1); }, logits);
}

TEST_CASE("cross_entropy on non-contiguous logits: gradient matches finite differences", "[grad]") {
  const Tensor labels = from_vector<int64_t>({4, 0, 2});
  CHECK_GRADCHECK([&](const Tensor& t) { return cross_entropy(t, labels); }, transposed_leaf(109));
}

TEST_CASE("cross_entropy on a single row of two classes: gradient matches finite differences", "[grad]") {
  const Tensor labels = from_vector<int64_t>({1});
  CHECK_GRADCHECK([&](const Tensor& t) { return cross_entropy(t, labels); }, leaf({1, 2}, 110));
}

TEST_CASE("mse_loss: gradient matches finite differences for input and target", "[grad]") {
  const Tensor input = leaf({3, 5}, 111), target = leaf({3, 5}, 112);
  CHECK_GRADCHECK([](const Inputs& in) { return mse_loss(in[0], in[1]); }, {input, target});
  CHECK_GRADCHECK([](const Inputs& in) { return mse_loss(in[0], in[1], Reduction::Sum); }, {input, target});
  CHECK_GRADCHECK([](const Inputs& in) { return mse_loss(in[0], in[1], Reduction::None); }, {input, target});
}

TEST_CASE("dropout: with the generator reset to one seed, gradient matches finite differences", "[grad]") {
  // gradcheck evaluates fn many times: a fresh Generator per call gives the same mask every time.
  CHECK_GRADCHECK(
      [](const Tensor& t) {
        Generator g(42);
        return dropout(t, 0.3, true, g);
      },
      leaf({5, 7}, 113));
  CHECK_GRADCHECK(
      [](const Tensor& t) {
        Generator g(43);
        return dropout(t, 0.5, false, g);  // eval: the identity
      },
      leaf({5, 7}, 114));
}

// ===================================== copies and views =========================================

TEST_CASE("contiguous: gradient of a dense copy of a transposed tensor matches", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.contiguous() * 2.0; }, transposed_leaf(115));
  CHECK_GRADCHECK([](const Tensor& t) { return t.transpose(0, 1).contiguous(); }, leaf({3, 5}, 116));
  CHECK_GRADCHECK([](const Tensor& t) { return t.contiguous(); }, leaf({3, 5}, 117));  // already dense
}

TEST_CASE("clone: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.clone(); }, leaf({3, 5}, 118));
  CHECK_GRADCHECK([](const Tensor& t) { return t.clone() * t; }, narrowed_leaf(119));
}

TEST_CASE("to(dtype) float64 -> float64 and to(same device): gradient passes through", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.to(DType::f64) * 3.0; }, leaf({3, 5}, 120));
  CHECK_GRADCHECK([](const Tensor& t) { return t.to(Device::cpu(0)) * 3.0; }, leaf({3, 5}, 121));
}

TEST_CASE("to(device): gradient flows back across logical CPU devices", "[grad]") {
  REQUIRE(cpu_device_count() >= 2);
  CHECK_GRADCHECK([](const Tensor& t) { return (tanh(t.to(Device::cpu(1))) * 2.0).to(Device::cpu(0)); },
                  leaf({3, 5}, 122));
}

TEST_CASE("reshape and view: gradient matches finite differences, incl. -1 and non-contiguous input", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.reshape({5, 3}) * 2.0; }, leaf({3, 5}, 123));
  CHECK_GRADCHECK([](const Tensor& t) { return t.view({-1, 4}); }, leaf({3, 4, 5}, 124));
  CHECK_GRADCHECK([](const Tensor& t) { return t.view({15}); }, leaf({3, 5}, 125));
  // A reshape of a transposed tensor must copy; the gradient still lands in the right elements.
  CHECK_GRADCHECK([](const Tensor& t) { return t.reshape({15}) * 2.0; }, transposed_leaf(126));
  CHECK_GRADCHECK([](const Tensor& t) { return t.transpose(0, 1).reshape({-1, 3}); }, leaf({3, 5}, 127));
  // A view of a non-contiguous tensor that the strides allow: the gradient flows to the right elements.
  CHECK_GRADCHECK([](const Tensor& t) { return t.transpose(0, 1).view({3, 2, 2, 2}) * 2.0; }, leaf({2, 3, 4}, 128));
  CHECK_GRADCHECK([](const Tensor& t) { return t.narrow(1, 1, 3).view({2, 2, 3}); }, leaf({4, 6}, 129));
}

TEST_CASE("transpose and t: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.transpose(0, 2) * 2.0; }, leaf({2, 3, 4}, 128));
  CHECK_GRADCHECK([](const Tensor& t) { return t.transpose(-1, 0); }, leaf({2, 3, 4}, 129));
  CHECK_GRADCHECK([](const Tensor& t) { return t.t() * 3.0; }, leaf({3, 5}, 130));
}

TEST_CASE("permute: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.permute({2, 0, 1}) * 2.0; }, leaf({2, 3, 4}, 131));
  CHECK_GRADCHECK([](const Tensor& t) { return exp(t.permute({1, 2, 0})); }, leaf({2, 3, 4}, 132));
}

TEST_CASE("narrow: gradient goes to the narrowed region only", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.narrow(1, 1, 3) * 2.0; }, leaf({3, 5}, 133));
  CHECK_GRADCHECK([](const Tensor& t) { return t.narrow(0, 2, 1); }, leaf({3, 5}, 134));
  CHECK_GRADCHECK([](const Tensor& t) { return t.narrow(-1, 0, 2) * t.narrow(-1, 3, 2); }, leaf({3, 5}, 135));
}

TEST_CASE("slice with step: gradient goes to the selected elements only", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.slice(1, 0, 5, 2) * 2.0; }, leaf({3, 5}, 136));
  CHECK_GRADCHECK([](const Tensor& t) { return t.slice(0, 1, 7, 3); }, leaf({7, 3}, 137));
  CHECK_GRADCHECK([](const Tensor& t) { return t.slice(1, 1, 4); }, leaf({3, 5}, 138));
}

TEST_CASE("select: gradient goes to the selected slice only", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.select(0, 1) * 2.0; }, leaf({3, 5}, 139));
  CHECK_GRADCHECK([](const Tensor& t) { return t.select(-1, 4); }, leaf({3, 5}, 140));
  CHECK_GRADCHECK([](const Tensor& t) { return t.select(1, 2) * t.select(1, 0); }, leaf({2, 3, 4}, 141));
}

TEST_CASE("expand: gradient sums over the expanded dimensions", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.expand({3, 5}) * 2.0; }, leaf({3, 1}, 142));
  CHECK_GRADCHECK([](const Tensor& t) { return t.expand({4, 3, -1}); }, leaf({3, 5}, 143));
  CHECK_GRADCHECK([](const Tensor& t) { return t.expand({2, 3, 5}) * 1.5; }, leaf({1, 5}, 144));
}

TEST_CASE("squeeze and unsqueeze: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.squeeze() * 2.0; }, leaf({3, 1, 5, 1}, 145));
  CHECK_GRADCHECK([](const Tensor& t) { return t.squeeze(1) * 2.0; }, leaf({3, 1, 5}, 146));
  CHECK_GRADCHECK([](const Tensor& t) { return t.unsqueeze(0) * 2.0; }, leaf({3, 5}, 147));
  CHECK_GRADCHECK([](const Tensor& t) { return t.unsqueeze(-1) * 2.0; }, leaf({3, 5}, 148));
  CHECK_GRADCHECK([](const Tensor& t) { return t.unsqueeze(1) * 2.0; }, leaf({3, 5}, 149));
}

TEST_CASE("flatten: gradient matches finite differences", "[grad]") {
  CHECK_GRADCHECK([](const Tensor& t) { return t.flatten() * 2.0; }, leaf({2, 3, 4}, 150));
  CHECK_GRADCHECK([](const Tensor& t) { return t.flatten(1) * 2.0; }, leaf({2, 3, 4}, 151));
  CHECK_GRADCHECK([](const Tensor& t) { return t.flatten(0, 1) * 2.0; }, leaf({2, 3, 4}, 152));
  CHECK_GRADCHECK([](const Tensor& t) { return t.flatten() * 2.0; }, transposed_leaf(153));
}

TEST_CASE("views: a chain of views composes the gradients", "[grad]") {
  CHECK_GRADCHECK(
      [](const Tensor& t) {
        return t.transpose(0, 2).narrow(0, 1, 3).slice(2, 0, 3, 2).unsqueeze(1).expand({3, 2, 3, 2}).flatten(1) * 2.0;
      },
      leaf({2, 3, 5}, 154));
}

// ================================ non-contiguous and tiny inputs ================================

TEST_CASE("elementwise ops on transposed and narrowed leaves: gradient matches finite differences", "[grad]") {
  const Tensor tr = transposed_leaf(155);  // [3, 5]
  const Tensor na = narrowed_leaf(156);    // [4, 3]
  CHECK_GRADCHECK([](const Tensor& t) { return exp(t); }, tr);
  CHECK_GRADCHECK([](const Tensor& t) { return tanh(t) * t; }, na);
  CHECK_GRADCHECK([](const Tensor& t) { return gelu(t, GeluApproximate::Tanh); }, tr);
  CHECK_GRADCHECK([](const Tensor& t) { return sum(t, {0}); }, tr);
  CHECK_GRADCHECK([](const Tensor& t) { return mean(t, {1}, true); }, na);
  CHECK_GRADCHECK([](const Inputs& in) { return add(in[0], in[1]); }, {tr, leaf({1, 5}, 157)});
  CHECK_GRADCHECK([](const Inputs& in) { return mul(in[0], in[1]); }, {na, narrowed_leaf(158)});
}

TEST_CASE("one-element tensors: gradient matches finite differences", "[grad]") {
  const Tensor one = leaf({1}, 159);
  const Tensor scalar = [] {
    Tensor s = scalar_tensor(0.7, DType::f64);
    return s.requires_grad_(true);
  }();
  CHECK_GRADCHECK([](const Tensor& t) { return tanh(t); }, one);
  CHECK_GRADCHECK([](const Tensor& t) { return sum(t); }, one);
  CHECK_GRADCHECK([](const Tensor& t) { return exp(t) * t; }, scalar);
  CHECK_GRADCHECK([](const Tensor& t) { return sum(t, {0, 1}); }, leaf({1, 1}, 160));
  CHECK_GRADCHECK([](const Tensor& t) { return softmax(t, 0); }, one);
  CHECK_GRADCHECK([](const Tensor& t) { return t.reshape({1, 1, 1}).squeeze(); }, one);
}

// ========================================= empty tensors ========================================

TEST_CASE("empty tensors: elementwise ops and sum run forward, backward gives an empty grad", "[grad]") {
  Tensor x = randn({0, 3}, DType::f64, 161).requires_grad_(true);
  Tensor y = tanh(x * 2.0) + x;
  CHECK(y.shape() == Shape{0, 3});
  Tensor s = sum(y);
  CHECK(s.item() == 0.0);
  s.backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().shape() == Shape{0, 3});
  CHECK(x.grad().dtype() == DType::f64);
}

TEST_CASE("empty tensors: sum over the empty dim gives zeros with gradient", "[grad]") {
  Tensor x = zeros({0, 3}, DType::f64).requires_grad_(true);
  Tensor y = sum(x, {0});
  CHECK(y.shape() == Shape{3});
  CHECK(y.to_vector<double>() == std::vector<double>{0, 0, 0});
  sum(y * 2.0).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().shape() == Shape{0, 3});
}

TEST_CASE("empty tensors: matmul with an empty M or K dimension", "[grad]") {
  SECTION("M = 0: [0,5] @ [5,4] is [0,4]") {
    Tensor a = zeros({0, 5}, DType::f64).requires_grad_(true);
    Tensor b = randn({5, 4}, DType::f64, 162).requires_grad_(true);
    Tensor c = matmul(a, b);
    CHECK(c.shape() == Shape{0, 4});
    sum(c).backward();
    CHECK(a.grad().shape() == Shape{0, 5});
    CHECK(b.grad().shape() == Shape{5, 4});
    CHECK(b.grad().to_vector<double>() == std::vector<double>(20, 0.0));
  }
  SECTION("K = 0: [3,0] @ [0,4] is a [3,4] of zeros") {
    Tensor a = zeros({3, 0}, DType::f64).requires_grad_(true);
    Tensor b = zeros({0, 4}, DType::f64).requires_grad_(true);
    Tensor c = matmul(a, b);
    CHECK(c.shape() == Shape{3, 4});
    CHECK(c.to_vector<double>() == std::vector<double>(12, 0.0));
    sum(c).backward();
    CHECK(a.grad().shape() == Shape{3, 0});
    CHECK(b.grad().shape() == Shape{0, 4});
  }
}

TEST_CASE("empty tensors: cat with an empty piece routes the gradient to the others", "[grad]") {
  const Tensor e = zeros({0, 3}, DType::f64).requires_grad_(true);
  CHECK_GRADCHECK([&](const Tensor& t) { return cat({e, t, e}, 0) * 2.0; }, leaf({2, 3}, 163));
}

// ==================================== dtype through autograd ====================================

TEST_CASE("to(dtype) float64 -> float32 -> float64: the leaf's gradient keeps its dtype", "[grad]") {
  Tensor x = randn({3, 5}, DType::f64, 164).requires_grad_(true);
  Tensor y = sum(x.to(DType::f32) * 2.0);
  CHECK(y.dtype() == DType::f32);
  y.backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == DType::f64);
  CHECK(x.grad().to_vector<double>() == std::vector<double>(15, 2.0));
}
