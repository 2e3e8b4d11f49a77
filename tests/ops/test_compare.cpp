// tests/ops/test_compare.cpp: the comparison family (kernels/compare.h) and its ops -- eq ... ge,
// where, masked_fill, tril, triu -- and the dtype promotion they and the binary ops share.
//
// [cpu] cases run in ringgrad_tests: values against loops written here, float64 gradcheck, errors.
// [cuda] cases run in the CUDA test programs (a GPU, or the kernel emulator): the same ops on cuda:0
// against the CPU, at sizes that make every grid-stride loop of kernels/cuda/compare.cu repeat on the
// emulator's small device. Comparisons and selections are exact, so results must be equal.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ringgrad/core/cuda.h>
#include <ringgrad/core/gradcheck.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>

#include "cuda/cuda_test_util.h"
#include "test_util.h"

using namespace ringgrad;

namespace {

using Inputs = std::vector<Tensor>;

Tensor leaf(const Shape& shape, uint64_t seed) { return randn(shape, DType::f64, seed).requires_grad_(true); }

std::vector<int64_t> bytes(const Tensor& mask) {
  REQUIRE(mask.dtype() == DType::u8);
  return mask.to(DType::i64).to_vector<int64_t>();
}

}  // namespace

// ---- CPU ------------------------------------------------------------------------------------------------

TEST_CASE("comparisons: a uint8 mask, broadcasting, NaN unequal to everything", "[compare][cpu]") {
  const Tensor a = from_vector(std::vector<float>{1, 2, NAN, 4, 5, 6}, Shape{2, 3});
  const Tensor b = from_vector(std::vector<float>{2, 2, NAN}, Shape{3});  // broadcast over rows
  CHECK(bytes(eq(a, b)) == std::vector<int64_t>{0, 1, 0, 0, 0, 0});
  CHECK(bytes(ne(a, b)) == std::vector<int64_t>{1, 0, 1, 1, 1, 1});
  CHECK(bytes(lt(a, b)) == std::vector<int64_t>{1, 0, 0, 0, 0, 0});
  CHECK(bytes(le(a, b)) == std::vector<int64_t>{1, 1, 0, 0, 0, 0});
  CHECK(bytes(gt(a, b)) == std::vector<int64_t>{0, 0, 0, 1, 1, 0});
  CHECK(bytes(ge(a, b)) == std::vector<int64_t>{0, 1, 0, 1, 1, 0});
  CHECK(eq(a, b).shape() == Shape{2, 3});
  CHECK(bytes(gt(a, 3.5)) == std::vector<int64_t>{0, 0, 0, 1, 1, 1});
  CHECK(bytes(eq(a.transpose(0, 1), 2.0)) == std::vector<int64_t>{0, 0, 1, 0, 0, 0});  // a strided operand
}

TEST_CASE("comparisons: operands of different dtypes meet as PyTorch promotes them", "[compare][cpu]") {
  const Tensor ids = from_vector(std::vector<int64_t>{0, 1, 2, 3}, Shape{4});
  CHECK(bytes(lt(ids, 1.5)) == std::vector<int64_t>{1, 1, 0, 0});  // not 1.5 truncated to 1
  CHECK(bytes(eq(ids, 2.0)) == std::vector<int64_t>{0, 0, 1, 0});
  const Tensor mask = from_vector(std::vector<int64_t>{0, 1, 1, 0}, Shape{4}).to(DType::u8);
  CHECK(bytes(gt(mask, -1.0)) == std::vector<int64_t>{1, 1, 1, 1});   // not -1 wrapped to 255
  CHECK(bytes(lt(mask, 300.0)) == std::vector<int64_t>{1, 1, 1, 1});  // not 300 wrapped to 44
  const Tensor half_steps = from_vector(std::vector<double>{0.5, 1.0, 2.5, 3.0}, Shape{4});
  CHECK(bytes(eq(ids.to(DType::f32), half_steps)) == std::vector<int64_t>{0, 1, 0, 1});  // float32 with float64
  CHECK(bytes(ge(ids, half_steps)) == std::vector<int64_t>{0, 1, 0, 1});                 // int64 with float64
  CHECK(promote_types(DType::u8, DType::f32) == DType::f32);
  CHECK(promote_types(DType::i64, DType::u8) == DType::i64);
  CHECK(promote_types(DType::bf16, DType::f16) == DType::f32);
  CHECK(promote_types(DType::f32, DType::f64) == DType::f64);
}

TEST_CASE("binary ops: a uint8 mask or int64 operand meets a float operand in the float dtype", "[compare][cpu]") {
  const Tensor x = randn({3, 4}, DType::f32, 1).requires_grad_(true);
  const Tensor keep = gt(x, 0.0);
  const Tensor y = keep * x;  // relu, the PyTorch way
  REQUIRE(y.dtype() == DType::f32);
  CHECK(y.to_vector<float>() == relu(x).to_vector<float>());
  sum(y).backward();
  CHECK(x.grad().to_vector<float>() == keep.to(DType::f32).to_vector<float>());
  CHECK((x + from_vector(std::vector<int64_t>{1, 2, 3, 4}, Shape{4})).dtype() == DType::f32);
  CHECK_ERROR(add(x, randn({3, 4}, DType::f64, 2)), "add", "float64");  // two float dtypes still must agree
}

TEST_CASE("where and masked_fill: values, broadcasting, scalars in the tensor's dtype", "[compare][cpu]") {
  const Tensor x = from_vector(std::vector<float>{1, -2, 3, -4, 5, -6}, Shape{2, 3});
  const Tensor pos = gt(x, 0.0);
  CHECK(where(pos, x, 0.0).to_vector<float>() == std::vector<float>{1, 0, 3, 0, 5, 0});
  CHECK(where(pos, -1.0, x).to_vector<float>() == std::vector<float>{-1, -2, -1, -4, -1, -6});
  const Tensor col = from_vector(std::vector<float>{10, 20}, Shape{2, 1});
  CHECK(where(pos, x, col).to_vector<float>() == std::vector<float>{1, 10, 3, 20, 5, 20});
  const Tensor filled = masked_fill(x, lt(x, 0.0), -INFINITY);
  REQUIRE(filled.dtype() == DType::f32);
  CHECK(filled.to_vector<float>() == std::vector<float>{1, -INFINITY, 3, -INFINITY, 5, -INFINITY});
  // A [T, T] causal mask fills every [.., T, T] slice.
  const Tensor scores = zeros({2, 3, 4, 4}, DType::f32);
  const Tensor future = triu(ones({4, 4}, DType::u8), 1);
  const std::vector<float> att = softmax(masked_fill(scores, future, -INFINITY), -1).to_vector<float>();
  for (int64_t s = 0; s < 6; ++s)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        const float want = j <= i ? 1.0f / static_cast<float>(i + 1) : 0.0f;
        CHECK(att[static_cast<size_t>((s * 4 + i) * 4 + j)] == Approx(want));
      }
}

TEST_CASE("where, masked_fill, tril and triu: gradients match finite differences", "[compare][cpu][grad]") {
  const Tensor cond = gt(randn({4, 1, 5}, DType::f64, 3), 0.0);
  CHECK_GRADCHECK([&](const Inputs& in) { return where(cond, in[0], in[1]); }, {leaf({3, 5}, 4), leaf({4, 3, 1}, 5)});
  CHECK_GRADCHECK([&](const Inputs& in) { return where(cond, in[0], 2.0); }, {leaf({4, 3, 5}, 6)});
  CHECK_GRADCHECK([&](const Inputs& in) { return masked_fill(in[0], cond, -7.0); }, {leaf({2, 4, 3, 5}, 7)});
  for (const int64_t diagonal : {-2, -1, 0, 1, 3}) {
    INFO("diagonal " << diagonal);
    CHECK_GRADCHECK([&](const Inputs& in) { return tril(in[0], diagonal); }, {leaf({2, 4, 5}, 8)});
    CHECK_GRADCHECK([&](const Inputs& in) { return triu(in[0].transpose(1, 2), diagonal); }, {leaf({2, 4, 5}, 9)});
  }
}

TEST_CASE("tril and triu: the triangle of the last two dims, for any diagonal", "[compare][cpu]") {
  const Tensor x = arange(0, 12, 1, DType::f32).reshape({3, 4}) + 1.0;
  CHECK(tril(x).to_vector<float>() == std::vector<float>{1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0});
  CHECK(triu(x).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
  CHECK(tril(x, -1).to_vector<float>() == std::vector<float>{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  CHECK(triu(x, 2).to_vector<float>() == std::vector<float>{0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0});
  CHECK(tril(x, 5).to_vector<float>() == x.to_vector<float>());
  CHECK(bytes(triu(ones({2, 3}, DType::u8), 1)) == std::vector<int64_t>{0, 1, 1, 0, 0, 1});
}

TEST_CASE("comparison ops: bad arguments are errors naming the op and what was expected", "[compare][cpu]") {
  const Tensor x = randn({2, 3}, DType::f32, 10);
  CHECK_ERROR(where(gt(x, 0.0).to(DType::f32), x, x), "where", "condition", "uint8", "float32");
  CHECK_ERROR(masked_fill(x, ones({4, 3}, DType::u8), 0.0), "masked_fill", "[4, 3]");
  CHECK_ERROR(masked_fill(x, ones({2, 2, 3}, DType::u8), 0.0), "masked_fill", "broadcasts to x's shape [2, 3]");
  CHECK_ERROR(lt(x, randn({4}, DType::f32, 11)), "lt", "broadcast");
  CHECK_ERROR(masked_fill(zeros({2}, DType::i64), ones({2}, DType::u8), 0.5), "masked_fill", "0.5", "int64");
  CHECK_ERROR(masked_fill(zeros({2}, DType::u8), ones({2}, DType::u8), 256.0), "masked_fill", "256", "uint8");
  CHECK_ERROR(tril(randn({5}, DType::f32, 12)), "tril", "at least 2 dimensions", "[5]");
  CHECK_ERROR(eq(x, Tensor()), "eq", "b", "undefined");
}

// ---- CUDA -----------------------------------------------------------------------------------------------

namespace {

const Device kGpu = Device::cuda(0);

void check_on_gpu(const std::function<Tensor(const Inputs&)>& fn, const Inputs& host_inputs, const std::string& what) {
  Inputs gpu_inputs;
  for (const Tensor& t : host_inputs) gpu_inputs.push_back(t.to(kGpu));
  const Tensor want = fn(host_inputs), got = fn(gpu_inputs);
  REQUIRE(got.device() == kGpu);
  REQUIRE(got.dtype() == want.dtype());
  test::check_close(got.to(Device::cpu()).to(DType::f64), want.to(DType::f64), 0.0, 0.0, what);
}

}  // namespace

TEST_CASE("cuda compare: comparisons, where and masked_fill agree with the CPU, broadcast and strided",
          "[compare][cuda]") {
  test::require_gpu();
  for (const DType dt : {DType::f32, DType::f64}) {
    INFO("dtype " << dt);
    const Tensor a = randn({5, 7, 41}, dt, 20);
    const Tensor b = randn({7, 1}, dt, 21);
    for (const auto& [name, fn] : std::vector<std::pair<std::string, Tensor (*)(const Tensor&, const Tensor&)>>{
             {"eq", eq}, {"ne", ne}, {"lt", lt}, {"le", le}, {"gt", gt}, {"ge", ge}}) {
      check_on_gpu([fn = fn](const Inputs& in) { return fn(in[0], in[1]); }, {a, b}, name);
    }
    check_on_gpu([](const Inputs& in) { return eq(in[0], in[0].transpose(1, 2).transpose(1, 2)); }, {a}, "eq self");
    const Tensor cond = gt(randn({7, 41}, dt, 22), 0.0);
    check_on_gpu([](const Inputs& in) { return where(in[0], in[1], in[2]); }, {cond, a, b}, "where");
    check_on_gpu([](const Inputs& in) { return masked_fill(in[1].transpose(1, 2), in[0].transpose(0, 1), -INFINITY); },
                 {cond, a}, "masked_fill, x and mask transposed");
  }
  // bfloat16 compares and selects as stored.
  const Tensor ab = randn({5, 7, 41}, DType::f32, 23).to(kGpu, DType::bf16);
  const Tensor mask = gt(ab, 0.25);
  const Tensor host = ab.to(Device::cpu(), DType::f32);
  CHECK(bytes(mask.to(Device::cpu())) == bytes(gt(host, 0.25)));
  CHECK(where(mask, ab, 0.0).to(Device::cpu(), DType::f32).to_vector<float>() ==
        where(gt(host, 0.25), host, 0.0).to_vector<float>());
}

TEST_CASE("cuda compare: tril, triu and the backward of where and tril agree with the CPU", "[compare][cuda]") {
  test::require_gpu();
  const Tensor x = randn({3, 29, 37}, DType::f32, 30);
  for (const int64_t diagonal : {-3, 0, 5}) {
    check_on_gpu([diagonal](const Inputs& in) { return tril(in[0], diagonal); }, {x}, "tril");
    check_on_gpu([diagonal](const Inputs& in) { return triu(in[0], diagonal); }, {x}, "triu");
  }
  const Tensor cond = lt(randn({29, 1}, DType::f32, 31), 0.0);
  const Tensor dy = randn({3, 29, 37}, DType::f32, 32);
  check_on_gpu(
      [](const Inputs& in) {
        const Tensor a = in[0].detach().requires_grad_(true);
        sum(tril(where(in[1], a, 0.0), -1) * in[2]).backward();
        return a.grad();
      },
      {x, cond, dy}, "where and tril backward");
}
