// tests/core/test_errors.cpp: bad input throws ringgrad::Error whose message names the op, what was
// expected and what was got (STYLE.md section 6).
//
// The checks look for the pieces a reader needs -- the op's name, the offending shapes, dtypes or
// devices -- not for one exact sentence, so the wording may improve without breaking the tests.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <ringgrad/core/autograd/engine.h>
#include <ringgrad/core/cuda.h>
#include <ringgrad/core/device.h>
#include <ringgrad/core/base/error.h>
#include <ringgrad/core/generator.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include "test_util.h"

using namespace ringgrad;

namespace {

Tensor f32(const Shape& shape) { return randn(shape, DType::f32, 1); }
Tensor f64(const Shape& shape) { return randn(shape, DType::f64, 2); }

}  // namespace

// ====================================== broadcasting shapes =====================================

TEST_CASE("add: non-broadcastable shapes name the op and both shapes", "[errors]") {
  CHECK_ERROR(add(f32({2, 3}), f32({4})), "add", "[2, 3]", "[4]");
  CHECK_ERROR(f32({2, 3}) + f32({4}), "add", "[2, 3]", "[4]");
}

TEST_CASE("sub, mul, div: non-broadcastable shapes name the op and both shapes", "[errors]") {
  CHECK_ERROR(sub(f32({3, 5}), f32({2, 5})), "sub", "[3, 5]", "[2, 5]");
  CHECK_ERROR(mul(f32({3, 5}), f32({2, 5})), "mul", "[3, 5]", "[2, 5]");
  CHECK_ERROR(div(f32({3, 1, 5}), f32({4, 3})), "div", "[3, 1, 5]", "[4, 3]");
}

// ============================================ matmul ============================================

TEST_CASE("matmul: mismatched inner dimensions name both shapes", "[errors]") {
  CHECK_ERROR(matmul(f32({32, 784}), f32({128, 10})), "matmul", "[32, 784]", "[128, 10]");
}

TEST_CASE("matmul: batch dims that do not broadcast, and unsupported ranks, throw", "[errors]") {
  CHECK_ERROR(matmul(f32({2, 3, 5}), f32({3, 5, 4})), "matmul", "broadcast", "[2, 3, 5]", "[3, 5, 4]");
  CHECK_ERROR(matmul(f32({2, 2, 3, 5}), f32({3, 1, 5, 4})), "matmul", "broadcast", "[2, 2, 3, 5]", "[3, 1, 5, 4]");
  CHECK_ERROR(matmul(f32({5}), f32({6, 4})), "matmul", "a.size(-1) == b.size(-2)", "[5]", "[6, 4]");
  CHECK_ERROR(matmul(f32({3, 5}), f32({6})), "matmul", "a.size(-1) == b.size(0)", "[3, 5]", "[6]");
  CHECK_ERROR(matmul(f32({}), f32({5, 4})), "matmul", "at least one dimension");
  CHECK_ERROR(bmm(f32({2, 3, 5}), f32({5, 4})), "bmm", "(B, M, K) @ (B, K, N)", "[5, 4]");
  CHECK_ERROR(bmm(f32({2, 3, 5}), f32({1, 5, 4})), "bmm", "[2, 3, 5]", "[1, 5, 4]");
}

TEST_CASE("linear: weight and bias shapes that do not fit the input throw", "[errors]") {
  CHECK_ERROR(linear(f32({3, 5}), f32({4, 6})), "linear", "[3, 5]", "[4, 6]");
  CHECK_ERROR(linear(f32({3, 5}), f32({4, 5}), f32({5})), "linear", "[5]");
  CHECK_ERROR(linear(f32({3, 5}), f32({4, 5}), f64({4})), "linear", "float32", "float64");
}

// ============================================ dtypes ============================================

TEST_CASE("binary ops: mismatched dtypes name both (no silent promotion)", "[errors]") {
  CHECK_ERROR(add(f32({2, 3}), f64({2, 3})), "add", "float32", "float64");
  CHECK_ERROR(mul(f64({2, 3}), f32({2, 3})), "mul", "float32", "float64");
  CHECK_ERROR(matmul(f32({3, 5}), f64({5, 4})), "matmul", "float32", "float64");
  CHECK_ERROR(cat({f32({2, 3}), f64({2, 3})}, 0), "cat", "float32", "float64");
}

TEST_CASE("stack: mismatched dtypes or devices name stack, not an op inside it", "[errors]") {
  REQUIRE(cpu_device_count() >= 2);
  CHECK_ERROR(stack({f32({2, 3}), f64({2, 3})}, 0), "stack", "float32", "float64");
  CHECK_ERROR(stack({f32({2, 3}), randn({2, 3}, Device::cpu(1), 6)}, 0), "stack", "cpu:0", "cpu:1");
}

TEST_CASE("mse_loss: mismatched dtypes or devices name mse_loss, not an op inside it", "[errors]") {
  REQUIRE(cpu_device_count() >= 2);
  CHECK_ERROR(mse_loss(f32({2, 3}), f64({2, 3})), "mse_loss", "float32", "float64");
  CHECK_ERROR(mse_loss(f32({2, 3}), randn({2, 3}, Device::cpu(1), 5)), "mse_loss", "cpu:0", "cpu:1");
}

TEST_CASE("floating-point ops on integer tensors name the op and the dtype", "[errors]") {
  const Tensor i = full({2, 3}, 4.0, DType::i64);
  CHECK_ERROR(log(i), "log", "int64");
  CHECK_ERROR(exp(i), "exp", "int64");
  CHECK_ERROR(tanh(zeros({3}, DType::u8)), "tanh", "uint8");
  CHECK_ERROR(softmax(i, 1), "softmax", "int64");
  CHECK_ERROR(pow(i, 0.5), "pow", "int64");
}

TEST_CASE("bfloat16 is rejected by the CPU ops", "[errors]") {
  // Either making the CPU bfloat16 tensor or computing with it must throw, naming the dtype.
  CHECK_ERROR([] { return tanh(empty({2, 3}, DType::bf16)); }(), "bfloat16");
  CHECK_ERROR([] { return add(empty({2, 3}, DType::bf16), empty({2, 3}, DType::bf16)); }(), "bfloat16");
}

TEST_CASE("float16 is rejected by the CPU ops", "[errors]") {
  // The host holds float16 (DDP's fp16 hook, checkpoints) but computes nothing in it, as bfloat16.
  CHECK_ERROR([] { return tanh(empty({2, 3}, DType::f16)); }(), "tanh", "float16");
  CHECK_ERROR([] { return add(empty({2, 3}, DType::f16), empty({2, 3}, DType::f16)); }(), "float16");
  CHECK_ERROR([] { return empty({2, 3}, DType::f16).to(DType::f32); }(), "float16");
}

TEST_CASE("requires_grad_ on an integer tensor throws", "[errors]") {
  CHECK_ERROR(full({3}, 1.0, DType::i64).requires_grad_(true), "requires_grad");
}

// ============================================ devices ===========================================

TEST_CASE("ops on tensors on different logical devices name both and suggest .to()", "[errors]") {
  REQUIRE(cpu_device_count() >= 2);
  const Tensor a = f32({2, 3});
  const Tensor b = randn({2, 3}, Device::cpu(1), 3);
  CHECK_ERROR(add(a, b), "add", "cpu:0", "cpu:1", ".to(");
  CHECK_ERROR(matmul(a, b.t()), "matmul", "cpu:0", "cpu:1");
  CHECK_ERROR(linear(a, randn({4, 3}, Device::cpu(1), 4)), "linear", "cpu:0", "cpu:1");
  CHECK_ERROR(cat({a, b}, 0), "cat", "cpu:0", "cpu:1");
  CHECK_ERROR(cross_entropy(a, from_vector<int64_t>({0, 1}, {2}, Device::cpu(1))), "cross_entropy", "cpu:0", "cpu:1");
}

TEST_CASE("a device index beyond the configured count is rejected", "[errors]") {
  CHECK_ERROR(zeros({2}, Device::cpu(99)), "cpu:99");
  CHECK_ERROR(f32({2}).to(Device::cpu(99)), "cpu:99");
}

TEST_CASE("a CUDA tensor in a program without the CUDA backend says how to get it", "[errors]") {
  if (built_with_cuda()) {
    WARN("this program has the CUDA backend; the CPU-only message is not checked (examples/consumer/main.cpp is)");
    return;
  }
  CHECK(cuda_device_count() == 0);
  CHECK_ERROR(zeros({2, 3}, Device::cuda(0)), "empty", "no CUDA backend in this program", "-DRINGGRAD_CUDA=ON",
              "ringgrad::cuda");
  CHECK_ERROR(f32({2, 3}).to(Device::cuda(0)), "CUDA");
  CHECK_ERROR(cuda_memory_stats(0), "cuda_memory_stats", "no CUDA backend in this program");
  CHECK_ERROR(cuda_pinned_allocator(), "cuda_pinned_allocator", "no CUDA backend in this program");
  cuda_empty_cache();  // nothing cached: nothing to do, and no error
}

TEST_CASE("a CUDA build without a GPU loads, runs CPU work, and names the missing GPU", "[errors]") {
  if (!built_with_cuda() || cuda_device_count() > 0) {
    WARN("not a CUDA build on a machine without a GPU; that case is not checked here");
    return;
  }
  CHECK(f32({2, 3}).numel() == 6);  // CPU work is unaffected
  CHECK_ERROR(zeros({2, 3}, Device::cuda(0)), "empty", "no CUDA GPU is visible");
  CHECK_ERROR(f32({2, 3}).to(Device::cuda(0)), "to", "no CUDA GPU is visible");
  CHECK_ERROR(cuda_memory_stats(0), "cuda_memory_stats", "no CUDA GPU is visible");
  CHECK_ERROR(cuda_synchronize(0), "cuda_synchronize", "no CUDA GPU is visible");
  cuda_empty_cache();
}

TEST_CASE("a CUDA device index beyond the visible GPUs is rejected with the valid range", "[errors]") {
  if (!built_with_cuda() || cuda_device_count() == 0) {
    WARN("no GPU visible; the range message is not checked");
    return;
  }
  const int n = cuda_device_count();
  CHECK_ERROR(zeros({2}, Device::cuda(n)), "empty", "cuda:0..cuda:", detail::str("got cuda:", n));
  CHECK_ERROR(f32({2}).to(Device::cuda(n)), "to", detail::str("got cuda:", n));
}

TEST_CASE("set_cpu_device_count after devices were used throws", "[errors]") {
  (void)zeros({1});
  CHECK_ERROR(set_cpu_device_count(cpu_device_count() + 1), "set_cpu_device_count");
}

TEST_CASE("Device::parse names the text it could not read", "[errors]") {
  CHECK_ERROR(Device::parse("gpu:0"), "gpu:0");
  CHECK_ERROR(Device::parse("cpu:one"), "cpu:one");
}

// ============================================ losses ============================================

TEST_CASE("cross_entropy: labels that are not int64 name the expected dtype", "[errors]") {
  CHECK_ERROR(cross_entropy(f32({3, 5}), from_vector<float>({0, 1, 2})), "cross_entropy", "int64", "float32");
}

TEST_CASE("cross_entropy: a label out of range names the label and the class count", "[errors]") {
  CHECK_ERROR(cross_entropy(f32({3, 5}), from_vector<int64_t>({0, 9, 2})), "cross_entropy", "9", "5");
  CHECK_ERROR(cross_entropy(f32({3, 5}), from_vector<int64_t>({0, -1, 2})), "cross_entropy", "-1");
}

TEST_CASE("cross_entropy: logits and labels whose shapes do not fit throw", "[errors]") {
  CHECK_ERROR(cross_entropy(f32({3, 5}), from_vector<int64_t>({0, 1, 2, 3})), "cross_entropy");
  CHECK_ERROR(cross_entropy(f32({5}), from_vector<int64_t>({0})), "cross_entropy");
}

TEST_CASE("mse_loss: different shapes name both", "[errors]") {
  CHECK_ERROR(mse_loss(f32({3, 5}), f32({5, 3})), "mse_loss", "[3, 5]", "[5, 3]");
}

TEST_CASE("dropout: p outside (0, 1) throws naming p", "[errors]") {
  Generator g(1);
  CHECK_ERROR(dropout(f32({3}), 1.5, true, g), "dropout", "1.5");
  CHECK_ERROR(dropout(f32({3}), -0.5, true, g), "dropout", "-0.5");
}

// ============================================= views ============================================

TEST_CASE("reshape and view to an incompatible size name the shapes", "[errors]") {
  CHECK_ERROR(f32({2, 3}).reshape({4, 2}), "reshape", "[4, 2]");
  CHECK_ERROR(f32({2, 3}).view({5, -1}), "view");
  CHECK_ERROR(f32({2, 3}).reshape({-1, -1}), "reshape");
}

TEST_CASE("view of a non-contiguous tensor throws and suggests reshape", "[errors]") {
  CHECK_ERROR(f32({3, 5}).t().view({15}), "view", "reshape");
}

TEST_CASE("narrow, slice and select outside the tensor throw", "[errors]") {
  CHECK_ERROR(f32({4, 5}).narrow(1, 3, 4), "narrow");
  CHECK_ERROR(f32({4, 5}).narrow(2, 0, 1), "narrow");
  CHECK_ERROR(f32({4, 5}).slice(1, 0, 5, 0), "slice");
  CHECK_ERROR(f32({3, 5}).select(0, 3), "select", "3");
  CHECK_ERROR(f32({3, 5}).select(1, -6), "select");
}

TEST_CASE("dims out of range throw in views and reductions", "[errors]") {
  const Tensor x = f32({3, 5});
  CHECK_ERROR(x.transpose(0, 2), "transpose");
  CHECK_ERROR(x.permute({0, 0}), "permute");
  CHECK_ERROR(x.permute({1}), "permute");
  CHECK_ERROR(x.unsqueeze(3), "unsqueeze");
  CHECK_ERROR(x.squeeze(2), "squeeze");
  CHECK_ERROR(x.size(2), "2");
  CHECK_ERROR(sum(x, {2}), "sum");
  CHECK_ERROR(mean(x, {-3}), "mean");
  CHECK_ERROR(softmax(x, 2), "softmax");
  CHECK_ERROR(max(x, 2), "max");
}

TEST_CASE("expand to an incompatible shape names both shapes", "[errors]") {
  CHECK_ERROR(f32({3, 2}).expand({3, 4}), "expand", "[3, 2]", "[3, 4]");
}

// ===================================== joining and splitting ====================================

TEST_CASE("cat, stack, split and chunk reject bad arguments", "[errors]") {
  CHECK_ERROR(cat({f32({2, 3}), f32({2, 4})}, 0), "cat");
  CHECK_ERROR(cat({}, 0), "cat");
  CHECK_ERROR(stack({f32({2, 3}), f32({3, 2})}, 0), "stack");
  CHECK_ERROR(split(f32({7, 3}), 0, 0), "split");
  CHECK_ERROR(chunk(f32({7, 3}), 0, 0), "chunk");
}

// ===================================== element access ===========================================

TEST_CASE("item on a multi-element tensor names the op and the shape it got", "[errors]") {
  CHECK_ERROR(f32({2, 3}).item(), "item", "[2, 3]");
}

TEST_CASE("data<float>() on a float64 tensor names both dtypes", "[errors]") {
  CHECK_ERROR(f64({2, 3}).data<float>(), "data", "float32", "float64");
}

TEST_CASE("from_vector with the wrong element count names the count and the shape", "[errors]") {
  CHECK_ERROR(from_vector<float>({1, 2, 3}, {2, 2}), "from_vector", "[2, 2]");
}

TEST_CASE("an undefined tensor says it is undefined", "[errors]") {
  CHECK_ERROR(Tensor().shape(), "undefined");
  CHECK_ERROR(add(Tensor(), f32({2})), "undefined");
}

TEST_CASE("factories reject negative sizes and a zero arange step", "[errors]") {
  CHECK_THROWS_AS(zeros({-1, 3}), Error);
  CHECK_ERROR(arange(0.0, 5.0, 0.0), "arange");
}

// ============================================ autograd ==========================================

TEST_CASE("backward with a gradient of the wrong shape names both shapes", "[errors]") {
  Tensor x = f64({3, 4}).requires_grad_(true);
  const Tensor y = x * 2.0;
  CHECK_ERROR(y.backward(ones({4, 3}, DType::f64)), "[3, 4]", "[4, 3]");
}

TEST_CASE("leaf-only autograd calls on a non-leaf throw", "[errors]") {
  Tensor x = f64({3, 4}).requires_grad_(true);
  Tensor y = x * 2.0;
  CHECK_THROWS_AS(y.register_post_accumulate_grad_hook([](const Tensor&) {}), Error);
  CHECK_THROWS_AS(y.requires_grad_(false), Error);
}
