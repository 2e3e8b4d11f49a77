// tests/core/test_grad_destination.cpp: Tensor::set_grad_destination, memory a leaf's gradient is to
// live in. Every backward that produces the leaf's gradient must land it there -- written in place by
// a GEMM (linear, matmul) or copied in by AccumulateGrad (any other op) -- with accumulation, zero_grad,
// a .grad the user replaced, gradient hooks and a shared leaf behaving as they do without one.
#include <catch2/catch.hpp>

#include <vector>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/base/error.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>

using namespace ringgrad;
using Catch::Contains;

namespace {

std::vector<double> values(const Tensor& t) { return t.contiguous().to_vector<double>(); }

// A view into a flat buffer, as DDP's bucket slots are: `offset` elements in, shaped like `like`.
Tensor slot_of(const Tensor& buffer, int64_t offset, const Tensor& like) {
  return buffer.narrow(0, offset, like.numel()).view(like.shape());
}

// The losses whose gradient w.r.t. w is checked: one per kind of backward that reaches a leaf.
enum class Use { Tanh, Mul, Linear, LinearRelu, Matmul, MatmulBatched };

Tensor loss_of(Use use, const Tensor& w, const Tensor& x) {
  switch (use) {
    case Use::Tanh: return sum(tanh(w) * x);
    case Use::Mul: return sum(w * x);
    case Use::Linear: return sum(linear(x, w, Tensor()) * 0.5);
    case Use::LinearRelu: return sum(linear(x, w, Tensor(), Activation::Relu));
    case Use::Matmul: return sum(matmul(x, w));
    case Use::MatmulBatched: return sum(matmul(x.reshape({3, 1, 5}), w));  // w shared by the batch
  }
  return Tensor();
}

// x is (3, 5); w is (3, 5) for the elementwise ops, (4, 5) for linear and (5, 4) for matmul.
Shape weight_shape(Use use) {
  if (use == Use::Tanh || use == Use::Mul) return {3, 5};
  if (use == Use::Linear || use == Use::LinearRelu) return {4, 5};
  return {5, 4};
}

// The gradient without a destination, for comparison.
std::vector<double> plain_gradient(Use use, const Tensor& w0, const Tensor& x) {
  const Tensor w = w0.detach().clone().requires_grad_(true);
  loss_of(use, w, x).backward();
  return values(w.grad());
}

}  // namespace

TEST_CASE("grad destination: a gradient from any op lands in it and .grad becomes it", "[engine][grad]") {
  const Use use = GENERATE(Use::Tanh, Use::Mul, Use::Linear, Use::LinearRelu, Use::Matmul, Use::MatmulBatched);
  CAPTURE(static_cast<int>(use));
  const Tensor x = randn({3, 5}, DType::f64, 11);
  const Tensor w = randn(weight_shape(use), DType::f64, 12).requires_grad_(true);
  const std::vector<double> expected = plain_gradient(use, w, x);

  // The destination holds garbage from "an earlier step": .grad is undefined, so it is overwritten.
  const Tensor buffer = full({w.numel() + 7}, 123.0, DType::f64);
  const Tensor dest = slot_of(buffer, 7, w);
  w.set_grad_destination(dest);
  CHECK(w.grad_destination().same(dest));
  loss_of(use, w, x).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().same(dest));
  const std::vector<double> got = values(dest);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected[i]).epsilon(1e-12));
  CHECK(values(buffer.narrow(0, 0, 7)) == std::vector<double>(7, 123.0));  // nothing outside the slot
}

TEST_CASE("grad destination: a second backward adds into it in place, and zero_grad starts it over", "[engine][grad]") {
  const Use use = GENERATE(Use::Tanh, Use::Linear, Use::Matmul);
  CAPTURE(static_cast<int>(use));
  const Tensor x = randn({3, 5}, DType::f64, 21);
  const Tensor w = randn(weight_shape(use), DType::f64, 22).requires_grad_(true);
  const std::vector<double> once = plain_gradient(use, w, x);
  const Tensor dest = zeros(w.shape(), DType::f64);
  w.set_grad_destination(dest);

  loss_of(use, w, x).backward();
  loss_of(use, w, x).backward();
  CHECK(w.grad().same(dest));
  std::vector<double> got = values(dest);
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(2 * once[i]).epsilon(1e-12));

  // zero_grad (set_to_none, as nn's): the next backward overwrites what the destination holds.
  w.set_grad(Tensor());
  loss_of(use, w, x).backward();
  CHECK(w.grad().same(dest));
  got = values(dest);
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(once[i]).epsilon(1e-12));

  // zero_grad in place: .grad is still the destination, zeroed; the next backward adds to zero.
  {
    NoGradGuard no_grad;
    w.grad().copy_(zeros_like(w));
  }
  loss_of(use, w, x).backward();
  CHECK(w.grad().same(dest));
  got = values(dest);
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(once[i]).epsilon(1e-12));
}

TEST_CASE("grad destination: a .grad the user set is accumulated as usual and the destination left alone",
          "[engine][grad]") {
  const Use use = GENERATE(Use::Tanh, Use::Linear);
  CAPTURE(static_cast<int>(use));
  const Tensor x = randn({3, 5}, DType::f64, 31);
  const Tensor w = randn(weight_shape(use), DType::f64, 32).requires_grad_(true);
  const std::vector<double> once = plain_gradient(use, w, x);
  const Tensor dest = full(w.shape(), -7.0, DType::f64);
  w.set_grad_destination(dest);

  const Tensor mine = ones(w.shape(), DType::f64);
  w.set_grad(mine);
  loss_of(use, w, x).backward();
  CHECK_FALSE(w.grad().same(dest));
  CHECK(values(dest) == std::vector<double>(dest.numel(), -7.0));
  CHECK(values(mine) == std::vector<double>(mine.numel(), 1.0));  // out of place, as without a destination
  std::vector<double> got = values(w.grad());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(1.0 + once[i]).epsilon(1e-12));

  // Turned off: gradients are the engine's own tensors again.
  w.set_grad(Tensor());
  w.set_grad_destination(Tensor());
  CHECK_FALSE(w.grad_destination().defined());
  loss_of(use, w, x).backward();
  CHECK_FALSE(w.grad().same(dest));
  CHECK(values(dest) == std::vector<double>(dest.numel(), -7.0));
}

TEST_CASE("grad destination: a gradient hook sees the whole gradient first, a shared leaf sums both uses",
          "[engine][grad]") {
  const Tensor x = randn({3, 5}, DType::f64, 41);
  const Tensor w = randn({4, 5}, DType::f64, 42).requires_grad_(true);
  const std::vector<double> once = plain_gradient(Use::Linear, w, x);
  const Tensor dest = zeros(w.shape(), DType::f64);
  w.set_grad_destination(dest);

  // The hook doubles the gradient: the GEMM must not have written the undoubled one in place.
  int calls = 0;
  w.register_hook([&calls](const Tensor& g) {
    ++calls;
    return g * 2.0;
  });
  loss_of(Use::Linear, w, x).backward();
  CHECK(calls == 1);
  CHECK(w.grad().same(dest));
  std::vector<double> got = values(dest);
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(2 * once[i]).epsilon(1e-12));

  // A leaf used by two GEMMs that write in place (the first overwrites, the second adds) and by an
  // elementwise op whose gradient AccumulateGrad adds in (weight tying): the sum of all three.
  const Tensor x4 = randn({3, 4}, DType::f64, 43);
  auto tied = [&](const Tensor& v) { return sum(linear(x, v, Tensor())) + sum(matmul(x4, v)) + sum(tanh(v)); };
  const Tensor plain = w.detach().clone().requires_grad_(true);
  tied(plain).backward();
  const Tensor v = w.detach().clone().requires_grad_(true);
  const Tensor v_dest = full(v.shape(), 5.0, DType::f64);
  v.set_grad_destination(v_dest);
  tied(v).backward();
  CHECK(v.grad().same(v_dest));
  const std::vector<double> want = values(plain.grad());
  got = values(v_dest);
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
}

TEST_CASE("grad destination: a destination of another shape, dtype or device is refused", "[engine][grad]") {
  const Tensor w = zeros({4, 5}).requires_grad_(true);
  CHECK_THROWS_WITH(w.set_grad_destination(zeros({5, 4})), Contains("expected a destination of shape [4, 5]"));
  CHECK_THROWS_WITH(w.set_grad_destination(zeros({4, 5}, DType::f64)), Contains("dtype"));
  CHECK_THROWS_WITH((w * 2.0).set_grad_destination(zeros({4, 5})), Contains("expected a leaf"));
}
