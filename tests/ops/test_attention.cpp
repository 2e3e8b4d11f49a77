// tests/ops/test_attention.cpp: the attention family (kernels/attention.h) and
// scaled_dot_product_attention, against the same attention composed from matmul, masked_fill,
// softmax and matmul.
//
// [cpu] cases run in ringgrad_tests: values and float64 gradients against the composed ops (also at
// sizes where every block loop of kernels/cpu/attention.cpp repeats, with partial blocks), float64
// gradcheck, the same bits on 1 and 2 threads, errors; each with and without a key padding mask. [cuda] cases run in
// the CUDA test programs (a GPU, or the kernel emulator): forward and backward on cuda:0 against the CPU, at sizes
// where the blocks' task loops, the tile loops and the staging loops of kernels/cuda/attention.cu all go round more
// than once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <ringgrad/core/cuda.h>
#include <ringgrad/core/device.h>
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

// softmax(scale q k^T + mask) v with the ops a user would compose, the [T, S] matrix materialised:
// the causal triangle and the key padding mask (undefined: none; [..., S], broadcast to [..., T, S])
// become one [..., T, S] mask of hidden scores. A row with every score hidden is NaN in PyTorch; the
// fused op's rule, out 0 and no gradient, is written out here as a row of zero probabilities.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                          const Tensor& key_padding_mask = Tensor()) {
  Tensor scores = matmul(q, k.transpose(-2, -1)) * scale;
  const int64_t t = q.size(-2), s = k.size(-2);
  Tensor hidden = zeros({t, s}, TensorOptions(q.dtype()).device(q.device()));
  if (causal) hidden = triu(ones({t, s}, TensorOptions(q.dtype()).device(q.device())), 1);
  if (key_padding_mask.defined()) hidden = hidden + key_padding_mask.to(q.dtype()).unsqueeze(-2);
  const Tensor hidden_mask = gt(hidden + zeros_like(scores), 0.0);  // [..., T, S]
  const Tensor row_hidden = eq(sum(hidden_mask.to(q.dtype()), {-1}, /*keepdim=*/true), static_cast<double>(s));
  scores = masked_fill(masked_fill(scores, hidden_mask, -INFINITY), row_hidden, 0.0);
  return matmul(masked_fill(softmax(scores, -1), row_hidden, 0.0), v);
}

// A uint8 key padding mask of `shape` ([..., S]) from a rule: padded(flat index of the row, key).
template <typename Fn>
Tensor padding_mask(const Shape& shape, Fn&& padded) {
  const int64_t s = shape[shape.size() - 1];
  int64_t n = 1;
  for (const int64_t size : shape) n *= size;
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  for (size_t e = 0; e < bytes.size(); ++e)
    bytes[e] = padded(static_cast<int64_t>(e) / s, static_cast<int64_t>(e) % s) ? 1 : 0;
  return from_vector(bytes, shape);
}

// Values and the gradients of sum(out * w) for q, k, v, fused against composed, with an optional
// key padding mask.
void check_against_composed(const Shape& qs, const Shape& ks, const Shape& vs, bool causal, DType dt, double tol,
                            const Tensor& key_padding_mask = Tensor()) {
  const Tensor q = leaf(qs, 1, dt), k = leaf(ks, 2, dt), v = leaf(vs, 3, dt);
  const double scale = 1.0 / std::sqrt(static_cast<double>(qs[qs.size() - 1]));
  const Tensor fused = scaled_dot_product_attention(q, k, v, key_padding_mask, causal);
  const Tensor w = randn(fused.shape(), dt, 4);
  sum(fused * w).backward();
  const std::vector<Tensor> got = {fused.detach(), q.grad(), k.grad(), v.grad()};
  q.set_grad(Tensor());
  k.set_grad(Tensor());
  v.set_grad(Tensor());
  const Tensor composed = composed_attention(q, k, v, causal, scale, key_padding_mask);
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

TEST_CASE("scaled_dot_product_attention: a key padding mask, broadcast or full, equals the composed ops",
          "[attention][cpu]") {
  // [B, 1, S] for every head: batch 0 pads its last 3 keys (right padding), batch 1 keys 2, 4 and 8.
  const Tensor per_batch =
      padding_mask({2, 1, 9}, [](int64_t b, int64_t j) { return b == 0 ? j >= 6 : j % 2 == 0 && j > 0 && j != 6; });
  // [B, H, S]: a different pattern per head, key 0 kept everywhere except in problem (1, 2), which
  // pads keys 0 and 1, so that with causal its queries 0 and 1 see no key at all.
  const Tensor per_head = padding_mask(
      {2, 3, 9}, [](int64_t bh, int64_t j) { return bh == 5 ? j < 2 : j > 0 && (j * 7 + bh * 5) % 4 == 1; });
  // A [B, 1, S] view whose keys are 2 bytes apart (a transposed [S, B] mask), which the op makes dense.
  const Tensor strided =
      padding_mask({9, 2}, [](int64_t j, int64_t b) { return j == 3 + b || j == 7; }).transpose(0, 1).unsqueeze(1);
  for (const bool causal : {false, true}) {
    INFO("causal " << causal);
    for (const Tensor& mask : {per_batch, per_head, strided, per_batch.expand({2, 3, 9})}) {
      INFO("mask " << mask.shape());
      check_against_composed({2, 3, 7, 5}, {2, 3, 9, 5}, {2, 3, 9, 4}, causal, DType::f64, 1e-12, mask);
    }
    check_against_composed({3, 11, 8}, {3, 9, 8}, {3, 9, 6}, causal, DType::f32, 2e-5,
                           padding_mask({3, 9}, [](int64_t b, int64_t j) { return j > b + 5; }));
  }
}

TEST_CASE("scaled_dot_product_attention: sizes past the CPU kernel's blocks, with partial ones, equal the composed ops",
          "[attention][cpu]") {
  // kernels/cpu/attention.cpp takes queries and keys 64 rows at a time: 150 queries are 3 blocks
  // (the last of 22 rows), 133 keys 3 (the last of 5), so the forward's online softmax runs across
  // key blocks and the backward sums dk and dv over query blocks. Batch 0 pads a few keys in every
  // key block; batch 1 pads keys 0..69, so with causal its first query block sees no key at all and
  // the second sees none in some rows -- and every key of the first key block is padding.
  const Tensor mask = padding_mask({2, 1, 133}, [](int64_t b, int64_t j) { return b == 0 ? j % 29 == 3 : j < 70; });
  for (const bool causal : {false, true}) {
    INFO("causal " << causal);
    check_against_composed({2, 2, 150, 20}, {2, 2, 133, 20}, {2, 2, 133, 12}, causal, DType::f64, 1e-12, mask);
    check_against_composed({2, 2, 150, 20}, {2, 2, 133, 20}, {2, 2, 133, 12}, causal, DType::f64, 1e-12);
    check_against_composed({3, 70, 20}, {3, 133, 20}, {3, 133, 20}, causal, DType::f64, 1e-12);  // more keys
  }
}

TEST_CASE("scaled_dot_product_attention: the CPU kernels give the same bits on 1 and 2 threads", "[attention][cpu]") {
  // 6 problems of 3 query blocks: the forward's (problem, block) units and the backward's problems
  // are split across threads when two are allowed. float32, so that any change of summation order
  // would show in the last bits.
  const Tensor mask = padding_mask({2, 3, 133}, [](int64_t bh, int64_t j) { return (j * 5 + bh) % 11 == 0; });
  auto run = [&](int threads, bool causal) {
    ringgrad::set_num_threads(threads);
    const Tensor q = leaf({2, 3, 150, 20}, 50, DType::f32), k = leaf({2, 3, 133, 20}, 51, DType::f32);
    const Tensor v = leaf({2, 3, 133, 12}, 52, DType::f32);
    const Tensor out = scaled_dot_product_attention(q, k, v, mask, causal);
    sum(out * randn(out.shape(), DType::f32, 53)).backward();
    ringgrad::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    std::vector<std::vector<float>> results;
    for (const Tensor& t : {out.detach(), q.grad(), k.grad(), v.grad()}) results.push_back(t.to_vector<float>());
    return results;
  };
  for (const bool causal : {false, true}) {
    INFO("causal " << causal);
    const auto one = run(1, causal), two = run(2, causal);
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (size_t i = 0; i < 4; ++i) {
      INFO(names[i]);
      CHECK(one[i] == two[i]);
    }
  }
}

TEST_CASE("scaled_dot_product_attention: a query that sees only padding gives 0 and no gradient, not NaN",
          "[attention][cpu]") {
  // Batch 0: every key padding. Batch 1: keys 0..2 padding, so with causal queries 0..2 see none.
  const Tensor mask = padding_mask({2, 1, 6}, [](int64_t b, int64_t j) { return b == 0 || j < 3; });
  const Tensor q = leaf({2, 3, 5, 4}, 40), k = leaf({2, 3, 6, 4}, 41), v = leaf({2, 3, 6, 3}, 42);
  const Tensor out = scaled_dot_product_attention(q, k, v, mask, /*causal=*/true);
  sum(out * randn(out.shape(), DType::f64, 43)).backward();
  auto all_zero = [](const Tensor& t) {
    for (const double x : t.contiguous().to_vector<double>())
      if (x != 0.0) return false;
    return true;
  };
  CHECK(all_zero(out.narrow(0, 0, 1)));
  CHECK(all_zero(out.narrow(0, 1, 1).narrow(2, 0, 3)));
  CHECK(all_zero(q.grad().narrow(0, 0, 1)));
  CHECK(all_zero(q.grad().narrow(0, 1, 1).narrow(2, 0, 3)));
  CHECK(all_zero(k.grad().narrow(0, 0, 1)));
  CHECK(all_zero(v.grad().narrow(0, 1, 1).narrow(2, 0, 3)));  // padding keys learn nothing
  CHECK_FALSE(all_zero(out.narrow(0, 1, 1).narrow(2, 3, 2)));
  CHECK_FALSE(all_zero(k.grad().narrow(0, 1, 1).narrow(2, 3, 3)));
  for (const Tensor& t : {out.detach(), q.grad(), k.grad(), v.grad()})
    for (const double x : t.to_vector<double>()) CHECK(std::isfinite(x));
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
    // A [B, 1, S] mask with a query that sees no key when causal (batch 1's key 0 is padding).
    const Tensor mask =
        padding_mask({2, 1, 6}, [](int64_t b, int64_t j) { return b == 0 ? j == 4 : j == 0 || j == 3; });
    CHECK_GRADCHECK([&](const Inputs& in) { return scaled_dot_product_attention(in[0], in[1], in[2], mask, causal); },
                    {leaf({2, 2, 5, 3}, 11), leaf({2, 2, 6, 3}, 12), leaf({2, 2, 6, 4}, 13)});
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

TEST_CASE("scaled_dot_product_attention: a bad key padding mask is an error naming what was expected",
          "[attention][cpu]") {
  const Tensor q = randn({2, 3, 4, 8}, DType::f32, 15), k = randn({2, 3, 5, 8}, DType::f32, 16);
  const char* op = "scaled_dot_product_attention";
  CHECK_ERROR(scaled_dot_product_attention(q, k, k, zeros({2, 1, 5}, DType::f32)), op,
              "key_padding_mask of dtype uint8", "float32");
  CHECK_ERROR(scaled_dot_product_attention(q, k, k, zeros({2, 1, 4}, DType::u8)), op, "key_padding_mask's last dim 5",
              "got 4");
  CHECK_ERROR(scaled_dot_product_attention(q, k, k, zeros({3, 1, 5}, DType::u8)), op,
              "leading dims to equal q's or be 1", "[3, 1, 5]", "[2, 3, 4, 8]");
  CHECK_ERROR(scaled_dot_product_attention(q, k, k, zeros({2, 5}, DType::u8)), op, "key_padding_mask with 3 dims",
              "[2, 5]", "view({B, 1, S})");
  CHECK_ERROR(scaled_dot_product_attention(q, k, k, zeros({2, 1, 5}, TensorOptions(DType::u8).device(Device::cpu(1)))),
              op, "key_padding_mask on cpu:0", "got cpu:1");
}

// ---- CUDA -----------------------------------------------------------------------------------------------

namespace {

// 12 problems x 3 blocks of 32 query rows (the last one partial) and of 32 keys: 36 tasks, more than
// the emulator's small device runs at once (32 blocks of 32 threads), so the task loops repeat, as
// does the delta kernel's loop over 1080 rows; 77 keys in tiles of 8 (the last partial) and head
// dims 24 and 20 make the tile and staging loops repeat with short tails.
const Shape kQShape{2, 6, 90, 24}, kKShape{2, 6, 77, 24}, kVShape{2, 6, 77, 20};

// Forward and backward on cuda:0 against the CPU at the sizes above, with an optional key padding mask.
void check_cuda_against_cpu(bool causal, const Tensor& key_padding_mask = Tensor()) {
  const Device gpu = Device::cuda(0);
  const Tensor q = randn(kQShape, DType::f32, 20), k = randn(kKShape, DType::f32, 21);
  const Tensor v = randn(kVShape, DType::f32, 22), w = randn({2, 6, 90, 20}, DType::f32, 23);
  std::vector<Tensor> results[2];
  for (const Device dev : {Device::cpu(), gpu}) {
    // detach(): on the CPU to() returns q itself, which must not become a leaf that requires grad.
    const Tensor qd = q.to(dev).detach().requires_grad_(true), kd = k.to(dev).detach().requires_grad_(true);
    const Tensor vd = v.to(dev).detach().requires_grad_(true);
    const Tensor mask = key_padding_mask.defined() ? key_padding_mask.to(dev) : Tensor();
    const Tensor out = scaled_dot_product_attention(qd, kd, vd, mask, causal);
    sum(out * w.to(dev)).backward();
    for (const Tensor& t : {out.detach(), qd.grad(), kd.grad(), vd.grad()})
      results[dev.is_cuda() ? 1 : 0].push_back(t.to(Device::cpu()));
  }
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < 4; ++i) test::check_close(results[1][i], results[0][i], 2e-5, 2e-4, names[i]);
}

}  // namespace

TEST_CASE("cuda attention: forward and backward agree with the CPU, causal or not", "[attention][cuda]") {
  test::require_gpu();
  const Device gpu = Device::cuda(0);
  for (const bool causal : {false, true}) {
    INFO("causal " << causal);
    check_cuda_against_cpu(causal);
  }
  // bfloat16 in, float32 inside: within bfloat16's rounding of the float32 result.
  const Tensor q = randn({3, 40, 16}, DType::f32, 24), k = randn({3, 40, 16}, DType::f32, 25);
  const Tensor v = randn({3, 40, 16}, DType::f32, 26);
  const Tensor want = scaled_dot_product_attention(q, k, v, true);
  const Tensor got =
      scaled_dot_product_attention(q.to(gpu, DType::bf16), k.to(gpu, DType::bf16), v.to(gpu, DType::bf16), true);
  test::check_close(got.to(Device::cpu(), DType::f32), want, 0.05, 0.05, "bfloat16");
}

TEST_CASE("cuda attention: with a key padding mask, forward and backward agree with the CPU", "[attention][cuda]") {
  test::require_gpu();
  // [B, 1, S]: batch 0 pads its last 13 keys and the whole tile 16..23; batch 1 pads keys 0..9 (so
  // with causal its first 10 queries see no key, in a block whose other rows do) and every 5th.
  const Tensor per_batch = padding_mask(
      {2, 1, 77}, [](int64_t b, int64_t j) { return b == 0 ? j >= 64 || (j >= 16 && j < 24) : j < 10 || j % 5 == 3; });
  // [B, H, S]: a pattern per head; problem 7 pads every key.
  const Tensor per_head =
      padding_mask({2, 6, 77}, [](int64_t bh, int64_t j) { return bh == 7 || (j * 3 + bh) % 7 < 2; });
  for (const bool causal : {false, true}) {
    for (const Tensor& mask : {per_batch, per_head}) {
      INFO("causal " << causal << ", mask " << mask.shape());
      check_cuda_against_cpu(causal, mask);
    }
  }
  CHECK_ERROR(scaled_dot_product_attention(randn({1, 4, 8}, TensorOptions(DType::f32).device(Device::cuda(0))),
                                           randn({1, 5, 8}, TensorOptions(DType::f32).device(Device::cuda(0))),
                                           randn({1, 5, 8}, TensorOptions(DType::f32).device(Device::cuda(0))),
                                           zeros({1, 5}, DType::u8)),
              "scaled_dot_product_attention", "key_padding_mask on cuda:0", "got cpu:0");
}

TEST_CASE("cuda attention: head dims past the kernels' limit and float64 are errors", "[attention][cuda]") {
  test::require_gpu();
  const Device gpu = Device::cuda(0);
  const Tensor wide = randn({1, 4, 130}, TensorOptions(DType::f32).device(gpu));
  CHECK_ERROR(scaled_dot_product_attention(wide, wide, wide), "head dims up to 128", "130");
  const Tensor f64 = randn({1, 4, 8}, TensorOptions(DType::f64).device(gpu));
  CHECK_ERROR(scaled_dot_product_attention(f64, f64, f64), "float64", "CPU");
}
