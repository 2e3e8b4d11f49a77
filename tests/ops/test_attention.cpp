// tests/ops/test_attention.cpp: the attention family (kernels/attention.h) and
// scaled_dot_product_attention, against the same attention composed from matmul, masked_fill,
// softmax and matmul.
//
// [cpu] cases run in ringgrad_tests: values and float64 gradients against the composed ops, float64
// gradcheck, errors. [cuda] cases run in the CUDA test programs (a GPU, or the kernel emulator):
// forward and backward on cuda:0 against the CPU, at sizes where the blocks' task loops, the tile
// loops and the staging loops of kernels/cuda/attention.cu all go round more than once.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
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

Tensor leaf(const Shape& shape, uint64_t seed, DType dt = DType::f64) {
  return randn(shape, dt, seed).requires_grad_(true);
}

// softmax(scale q k^T + mask) v with the ops a user would compose, the [T, S] matrix materialised.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  Tensor scores = matmul(q, k.transpose(-2, -1)) * scale;
  if (causal) {
    const int64_t t = q.size(-2), s = k.size(-2);
    scores = masked_fill(scores, triu(ones({t, s}, TensorOptions(DType::u8).device(q.device())), 1), -INFINITY);
  }
  return matmul(softmax(scores, -1), v);
}

// Values and the gradients of sum(out * w) for q, k, v, fused against composed.
void check_against_composed(const Shape& qs, const Shape& ks, const Shape& vs, bool causal, DType dt, double tol) {
  const Tensor q = leaf(qs, 1, dt), k = leaf(ks, 2, dt), v = leaf(vs, 3, dt);
  const double scale = 1.0 / std::sqrt(static_cast<double>(qs[qs.size() - 1]));
  const Tensor fused = scaled_dot_product_attention(q, k, v, causal);
  const Tensor w = randn(fused.shape(), dt, 4);
  sum(fused * w).backward();
  const std::vector<Tensor> got = {fused.detach(), q.grad(), k.grad(), v.grad()};
  q.set_grad(Tensor());
  k.set_grad(Tensor());
  v.set_grad(Tensor());
  const Tensor composed = composed_attention(q, k, v, causal, scale);
  sum(composed * w).backward();
  const std::vector<Tensor> want = {composed.detach(), q.grad(), k.grad(), v.grad()};
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < 4; ++i) test::check_close(got[i], want[i], tol, tol, names[i]);
}

}  // namespace

TEST_CASE("scaled_dot_product_attention: equals the composed ops, forward and backward", "[attention][cpu]") {
  for (const bool causal : {false, true}) {
    INFO("causal " << causal);
    check_against_composed({2, 3, 7, 5}, {2, 3, 9, 5}, {2, 3, 9, 4}, causal, DType::f64, 1e-12);
    check_against_composed({5, 6}, {5, 6}, {5, 3}, causal, DType::f64, 1e-12);
    check_against_composed({3, 11, 8}, {3, 4, 8}, {3, 4, 8}, causal, DType::f32, 2e-5);  // fewer keys than queries
  }
}

TEST_CASE("scaled_dot_product_attention: gradients match finite differences, causal or not", "[attention][cpu][grad]") {
  for (const bool causal : {false, true}) {
    INFO("causal " << causal);
    CHECK_GRADCHECK([&](const Inputs& in) { return scaled_dot_product_attention(in[0], in[1], in[2], causal); },
                    {leaf({2, 5, 3}, 5), leaf({2, 6, 3}, 6), leaf({2, 6, 4}, 7)});
    CHECK_GRADCHECK(
        [&](const Inputs& in) {
          return scaled_dot_product_attention(in[0], in[1].transpose(-2, -1), in[2], causal, 0.7);
        },
        {leaf({1, 2, 4, 3}, 8), leaf({1, 2, 3, 4}, 9), leaf({1, 2, 4, 2}, 10)});  // a strided k, a given scale
  }
}

TEST_CASE("scaled_dot_product_attention: a causal row sees only its past, and large scores stay finite",
          "[attention][cpu]") {
  // Query 0 sees key 0 only, so its output is v_0 exactly, whatever the scores.
  const Tensor q = randn({1, 4, 3}, DType::f32, 11), k = randn({1, 4, 3}, DType::f32, 12);
  const Tensor v = randn({1, 4, 2}, DType::f32, 13);
  const Tensor out = scaled_dot_product_attention(q, k, v, true);
  CHECK(out.narrow(1, 0, 1).to_vector<float>() == v.narrow(1, 0, 1).to_vector<float>());
  // Scores of +-1e4: the running maximum keeps every exp finite.
  const Tensor big = scaled_dot_product_attention(q * 1e4, k, v, false, 1.0);
  for (const float x : big.to_vector<float>()) CHECK(std::isfinite(x));
}

TEST_CASE("scaled_dot_product_attention: a value dim of 0 gives empty outputs and zero gradients", "[attention][cpu]") {
  const Tensor q = leaf({2, 3, 4}, 30), k = leaf({2, 5, 4}, 31), v = leaf({2, 5, 0}, 32);
  const Tensor out = scaled_dot_product_attention(q, k, v, true);
  CHECK(out.shape() == Shape{2, 3, 0});
  sum(out).backward();
  for (const double g : q.grad().to_vector<double>()) CHECK(g == 0.0);
  for (const double g : k.grad().to_vector<double>()) CHECK(g == 0.0);
}

TEST_CASE("scaled_dot_product_attention: bad shapes and dtypes are errors naming what was expected",
          "[attention][cpu]") {
  const Tensor q = randn({2, 4, 8}, DType::f32, 14);
  CHECK_ERROR(scaled_dot_product_attention(q, randn({2, 4, 7}, DType::f32, 1), q), "scaled_dot_product_attention",
              "k's last dim 8", "7");
  CHECK_ERROR(scaled_dot_product_attention(q, q, randn({2, 5, 8}, DType::f32, 1)), "v with 4 rows", "5");
  CHECK_ERROR(scaled_dot_product_attention(q, randn({3, 4, 8}, DType::f32, 1), q), "same leading");
  CHECK_ERROR(scaled_dot_product_attention(q, q.to(DType::f64), q), "k", "float64");
  CHECK_ERROR(scaled_dot_product_attention(randn({8}, DType::f32, 1), q, q), "at least 2");
  CHECK_ERROR(scaled_dot_product_attention(q, zeros({2, 0, 8}, DType::f32), zeros({2, 0, 8}, DType::f32)),
              "at least one key");
}

// ---- CUDA -----------------------------------------------------------------------------------------------

TEST_CASE("cuda attention: forward and backward agree with the CPU, causal or not", "[attention][cuda]") {
  test::require_gpu();
  const Device gpu = Device::cuda(0);
  // 12 problems x 3 blocks of 32 query rows (the last one partial) and of 32 keys: 36 tasks, more
  // than the emulator's small device runs at once (32 blocks of 32 threads), so the task loops
  // repeat, as does the delta kernel's loop over 1080 rows; 77 keys in tiles of 8 (the last partial)
  // and head dims 24 and 20 make the tile and staging loops repeat with short tails.
  const Shape qs{2, 6, 90, 24}, ks{2, 6, 77, 24}, vs{2, 6, 77, 20};
  for (const bool causal : {false, true}) {
    INFO("causal " << causal);
    const Tensor q = randn(qs, DType::f32, 20), k = randn(ks, DType::f32, 21), v = randn(vs, DType::f32, 22);
    const Tensor w = randn({2, 6, 90, 20}, DType::f32, 23);
    std::vector<Tensor> results[2];
    for (const Device dev : {Device::cpu(), gpu}) {
      // detach(): on the CPU to() returns q itself, which must not become a leaf that requires grad.
      const Tensor qd = q.to(dev).detach().requires_grad_(true), kd = k.to(dev).detach().requires_grad_(true);
      const Tensor vd = v.to(dev).detach().requires_grad_(true);
      const Tensor out = scaled_dot_product_attention(qd, kd, vd, causal);
      sum(out * w.to(dev)).backward();
      for (const Tensor& t : {out.detach(), qd.grad(), kd.grad(), vd.grad()})
        results[dev.is_cuda() ? 1 : 0].push_back(t.to(Device::cpu()));
    }
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (size_t i = 0; i < 4; ++i) test::check_close(results[1][i], results[0][i], 2e-5, 2e-4, names[i]);
  }
  // bfloat16 in, float32 inside: within bfloat16's rounding of the float32 result.
  const Tensor q = randn({3, 40, 16}, DType::f32, 24), k = randn({3, 40, 16}, DType::f32, 25);
  const Tensor v = randn({3, 40, 16}, DType::f32, 26);
  const Tensor want = scaled_dot_product_attention(q, k, v, true);
  const Tensor got =
      scaled_dot_product_attention(q.to(gpu, DType::bf16), k.to(gpu, DType::bf16), v.to(gpu, DType::bf16), true);
  test::check_close(got.to(Device::cpu(), DType::f32), want, 0.05, 0.05, "bfloat16");
}

TEST_CASE("cuda attention: head dims past the kernels' limit and float64 are errors", "[attention][cuda]") {
  test::require_gpu();
  const Device gpu = Device::cuda(0);
  const Tensor wide = randn({1, 4, 130}, TensorOptions(DType::f32).device(gpu));
  CHECK_ERROR(scaled_dot_product_attention(wide, wide, wide), "head dims up to 128", "130");
  const Tensor f64 = randn({1, 4, 8}, TensorOptions(DType::f64).device(gpu));
  CHECK_ERROR(scaled_dot_product_attention(f64, f64, f64), "float64", "CPU");
}
