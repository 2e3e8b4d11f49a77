// tests/ops/test_indexing.cpp: the indexing family (kernels/indexing.h) and its ops -- index_select,
// embedding, gather, scatter_add -- on every backend the test program has.
//
// Cases tagged [cpu] run in ringgrad_tests: values against loops written here, float64 gradcheck,
// errors. Cases tagged [cuda] run in the CUDA test programs (a GPU, or the kernel emulator): the same
// ops on cuda:0 against the CPU at odd sizes, large enough that every grid-stride loop of
// kernels/cuda/indexing.cu makes a second trip on the emulator's small device. The adds are summed in
// one fixed order on both backends, so float32 results must agree bit for bit.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ringgrad/core/cuda.h>
#include <ringgrad/core/gradcheck.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/kernels/indexing.h>

#include "cuda/cuda_test_util.h"
#include "test_util.h"

using namespace ringgrad;

namespace {

using Inputs = std::vector<Tensor>;

Tensor leaf(const Shape& shape, uint64_t seed) { return randn(shape, DType::f64, seed).requires_grad_(true); }

// n int64 values in [0, size), seeded; every value appears when n >= size is large enough.
Tensor indices(const Shape& shape, int64_t size, uint32_t seed, Device device = Device::cpu()) {
  std::vector<int64_t> v(static_cast<size_t>(shape.numel()));
  uint32_t state = seed * 2654435761u + 1;
  for (int64_t& e : v) {
    state = state * 1664525u + 1013904223u;
    e = static_cast<int64_t>((state >> 8) % static_cast<uint32_t>(size));
  }
  return from_vector(v, shape, device);
}

double at(const Tensor& t, const std::vector<int64_t>& idx) {
  int64_t flat = 0;
  for (size_t d = 0; d < idx.size(); ++d) flat = flat * t.shape()[static_cast<int64_t>(d)] + idx[d];
  return t.contiguous().to_vector<double>()[static_cast<size_t>(flat)];
}

}  // namespace

// ---- CPU: values, gradients, errors -------------------------------------------------------------------

TEST_CASE("index_select: the slices named by the index, along any dim", "[indexing][cpu]") {
  const Tensor x = randn({4, 5, 3}, DType::f32, 1);
  const Tensor idx = from_vector(std::vector<int64_t>{4, 0, 4, 2}, Shape{4});
  const Tensor y = index_select(x, 1, idx);
  REQUIRE(y.shape() == Shape{4, 4, 3});
  for (int64_t a = 0; a < 4; ++a)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t c = 0; c < 3; ++c) CHECK(at(y, {a, j, c}) == at(x, {a, idx.to_vector<int64_t>()[j], c}));
  // dim -1, a transposed (non-contiguous) x, an index of one element as a 0-d tensor, an empty index
  const Tensor xt = x.transpose(0, 2);  // [3, 5, 4]
  const Tensor last = index_select(xt, -1, from_vector(std::vector<int64_t>{3, 1}, Shape{2}));
  CHECK(last.shape() == Shape{3, 5, 2});
  CHECK(at(last, {2, 4, 0}) == at(x, {3, 4, 2}));
  CHECK(index_select(x, 0, from_vector(std::vector<int64_t>{2}, Shape{})).shape() == Shape{1, 5, 3});
  CHECK(index_select(x, 0, zeros({0}, DType::i64)).shape() == Shape{0, 5, 3});
}

TEST_CASE("index_select and embedding: gradients match finite differences, repeated indices summed",
          "[indexing][cpu][grad]") {
  const Tensor idx = from_vector(std::vector<int64_t>{1, 3, 1, 1, 0, 3, 2}, Shape{7});
  CHECK_GRADCHECK([&](const Inputs& in) { return index_select(in[0], 0, idx); }, {leaf({5, 3}, 2)});
  CHECK_GRADCHECK([&](const Inputs& in) { return index_select(in[0], 1, idx); }, {leaf({2, 4, 3}, 3)});
  CHECK_GRADCHECK([&](const Inputs& in) { return index_select(in[0], 2, idx); }, {leaf({2, 3, 6}, 4)});
  const Tensor tokens = indices({3, 5}, 6, 5);
  CHECK_GRADCHECK([&](const Inputs& in) { return embedding(tokens, in[0]); }, {leaf({6, 4}, 6)});
}

TEST_CASE("embedding: rows of the weight in the indices' shape, and no gradient for the padding row",
          "[indexing][cpu]") {
  const Tensor w = randn({7, 3}, DType::f32, 7).requires_grad_(true);
  const Tensor ids = from_vector(std::vector<int64_t>{6, 0, 2, 6, 6, 1}, Shape{2, 3});
  const Tensor y = embedding(ids, w, -1);  // padding row 6
  REQUIRE(y.shape() == Shape{2, 3, 3});
  CHECK(at(y, {1, 1, 2}) == at(w, {6, 2}));  // the padding row is still looked up
  sum(y * y).backward();
  const Tensor g = w.grad();
  for (int64_t c = 0; c < 3; ++c) {
    CHECK(at(g, {6, c}) == 0.0);
    CHECK(at(g, {0, c}) == Approx(2 * at(w, {0, c})));
    CHECK(at(g, {4, c}) == 0.0);  // never looked up
  }
  // Three rows of ids name row 2: their gradients add up.
  const Tensor w2 = randn({4, 2}, DType::f64, 8).requires_grad_(true);
  sum(embedding(from_vector(std::vector<int64_t>{2, 2, 2}, Shape{3}), w2)).backward();
  CHECK(w2.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 0, 3, 3, 0, 0});
}

TEST_CASE("gather: y[i][j] = x[index[i][j]][j], with an index shorter than x", "[indexing][cpu]") {
  const Tensor x = randn({4, 6}, DType::f64, 9);
  const Tensor idx = from_vector(std::vector<int64_t>{3, 0, 1, 1, 2, 0, 0, 3}, Shape{2, 4});
  const Tensor y0 = gather(x, 0, idx);
  REQUIRE(y0.shape() == Shape{2, 4});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j) CHECK(at(y0, {i, j}) == at(x, {static_cast<int64_t>(at(idx, {i, j})), j}));
  const Tensor y1 = gather(x, 1, idx);  // y[i][j] = x[i][index[i][j]]
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j) CHECK(at(y1, {i, j}) == at(x, {i, static_cast<int64_t>(at(idx, {i, j}))}));
  const Tensor s = scalar_tensor(2.5, DType::f64);
  CHECK(gather(s, 0, zeros({}, DType::i64)).item<double>() == 2.5);
}

TEST_CASE("scatter_add: a copy of x with src added where the index says, in order", "[indexing][cpu]") {
  const Tensor x = randn({3, 5}, DType::f64, 10);
  const Tensor src = randn({4, 5}, DType::f64, 11);
  const Tensor idx = from_vector(std::vector<int64_t>{2, 0, 1, 2, 0, 2, 2, 2, 1, 0, 0, 0, 0, 1, 1}, Shape{3, 5});
  const Tensor y = scatter_add(x, 0, idx, src);  // src longer than the index along dim 0: row 3 unused
  std::vector<double> want = x.to_vector<double>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j)
      want[static_cast<size_t>(static_cast<int64_t>(at(idx, {i, j})) * 5 + j)] += at(src, {i, j});
  CHECK(y.to_vector<double>() == want);
  CHECK(x.to_vector<double>() != want);  // not in place
}

TEST_CASE("gather and scatter_add: gradients match finite differences", "[indexing][cpu][grad]") {
  const Tensor idx = indices({3, 4, 2}, 5, 12);
  CHECK_GRADCHECK([&](const Inputs& in) { return gather(in[0], 1, idx); }, {leaf({3, 5, 2}, 13)});
  CHECK_GRADCHECK([&](const Inputs& in) { return gather(in[0], 1, idx); }, {leaf({4, 5, 3}, 14)});  // x longer
  const Tensor idx0 = indices({3, 4, 2}, 4, 15);
  CHECK_GRADCHECK([&](const Inputs& in) { return scatter_add(in[0], 0, idx0, in[1]); },
                  {leaf({4, 4, 2}, 16), leaf({3, 4, 2}, 17)});
  CHECK_GRADCHECK(
      [&](const Inputs& in) {
        return scatter_add(in[0], 2, indices({2, 3, 5}, 3, 18), in[1]);
      },
      {leaf({2, 3, 3}, 19), leaf({2, 4, 6}, 20)});  // src longer than the index everywhere
}

TEST_CASE("indexing ops: bad arguments are errors naming the op, the value and the place", "[indexing][cpu]") {
  const Tensor x = randn({4, 3}, DType::f32, 21);
  CHECK_ERROR(index_select(x, 0, from_vector(std::vector<int64_t>{1, 4}, Shape{2})), "index_select", "index 4",
              "out of range for dimension 0 of size 4", "position 1");
  CHECK_ERROR(index_select(x, 1, from_vector(std::vector<int64_t>{-1}, Shape{1})), "index_select", "index -1");
  CHECK_ERROR(index_select(x, 0, zeros({2}, DType::f32)), "index_select", "int64", "float32");
  CHECK_ERROR(index_select(x, 0, zeros({2, 1}, DType::i64)), "index_select", "1-D", "[2, 1]");
  CHECK_ERROR(index_select(x, 2, zeros({1}, DType::i64)), "index_select", "dim");
  CHECK_ERROR(embedding(from_vector(std::vector<int64_t>{0, 9}, Shape{2}), x), "embedding", "index 9", "size 4");
  CHECK_ERROR(embedding(zeros({2}, DType::i64), randn({4}, DType::f32, 1)), "embedding", "2-D weight", "[4]");
  CHECK_ERROR(embedding(zeros({2}, DType::i64), x, 4), "embedding", "padding_idx", "[-4, 3]", "4");
  CHECK_ERROR(gather(x, 0, zeros({4}, DType::i64)), "gather", "2 dimensions", "[4]");
  CHECK_ERROR(gather(x, 0, zeros({2, 5}, DType::i64)), "gather", "index.size(1) <= x.size(1) = 3");
  CHECK_ERROR(gather(x, 1, full({2, 2}, 3.0, DType::i64)), "gather", "index 3", "dimension 1 of size 3");
  CHECK_ERROR(scatter_add(x, 0, zeros({2, 3}, DType::i64), randn({1, 3}, DType::f32, 2)), "scatter_add",
              "index.size(0) <= src.size(0) = 1");
  CHECK_ERROR(scatter_add(x, 0, zeros({2, 3}, DType::i64), randn({2, 3}, DType::f64, 2)), "scatter_add", "float64");
}

namespace {
struct UnimplementedKernels {
  static constexpr const char* kName = "unimplemented";
};
// Another implementation of the indexing family, to claim the CPU's slot a second time.
struct OtherIndexing final : kernels::IndexingKernels {
  void index_select(DType, const void*, const kernels::IndexLayout&, const int64_t*, int64_t, void*,
                    Stream) const override {}
  void index_add(DType, const void*, int64_t, const int64_t*, const int64_t*, void*, const kernels::IndexLayout&,
                 Stream) const override {}
  void gather(DType, const void*, const kernels::IndexLayout&, const int64_t*, int64_t, void*, Stream) const override {}
  void scatter_add(DType, const void*, const int64_t*, int64_t, void*, const kernels::IndexLayout&,
                   Stream) const override {}
};
}  // namespace

TEST_CASE("kernel families: a family a backend does not implement, or two implementations of one, is an error",
          "[indexing][cpu]") {
  CHECK_ERROR(kernels::kernels_for<UnimplementedKernels>(DeviceKind::CPU, "probe_op"), "probe_op",
              "the cpu backend has no unimplemented kernels");
  // The same implementation again (a second copy of the library in the process) keeps the first;
  // another implementation for the same slot is an error.
  const kernels::IndexingKernels& cpu = kernels::kernels_for<kernels::IndexingKernels>(DeviceKind::CPU, "probe_op");
  CHECK(kernels::KernelRegistry<kernels::IndexingKernels>::add(DeviceKind::CPU, cpu));
  CHECK(&kernels::kernels_for<kernels::IndexingKernels>(DeviceKind::CPU, "probe_op") == &cpu);
  const OtherIndexing other;
  CHECK_ERROR(kernels::KernelRegistry<kernels::IndexingKernels>::add(DeviceKind::CPU, other), "indexing kernels",
              "registered twice", "cpu", "two different implementations");
  CHECK(&kernels::kernels_for<kernels::IndexingKernels>(DeviceKind::CPU, "probe_op") == &cpu);
}

// ---- CUDA: the same ops on cuda:0 against the CPU -------------------------------------------------------

namespace {

const Device kGpu = Device::cuda(0);

// The CPU and cuda:0 results of fn(inputs), inputs copied to each device.
void check_on_gpu(const std::function<Tensor(const Inputs&)>& fn, const Inputs& host_inputs, const std::string& what,
                  double tol = 0.0) {
  Inputs gpu_inputs;
  for (const Tensor& t : host_inputs) gpu_inputs.push_back(t.to(kGpu));
  const Tensor want = fn(host_inputs), got = fn(gpu_inputs);
  REQUIRE(got.device() == kGpu);
  test::check_close(got.to(Device::cpu()), want, tol, tol, what);
}

}  // namespace

TEST_CASE("cuda indexing: index_select, gather and their backward agree with the CPU bit for bit", "[indexing][cuda]") {
  test::require_gpu();
  for (const DType dt : {DType::f32, DType::f64}) {
    INFO("dtype " << dt);
    const Tensor x = randn({7, 33, 75}, dt, 30);
    const Tensor sel = indices({41}, 33, 31);
    check_on_gpu([](const Inputs& in) { return index_select(in[0], 1, in[1]); }, {x, sel}, "index_select dim 1");
    check_on_gpu([](const Inputs& in) { return index_select(in[0], 2, in[1]); }, {x, indices({9}, 75, 32)},
                 "index_select dim 2 (inner 1)");
    const Tensor gidx = indices({7, 21, 75}, 33, 33);
    check_on_gpu([](const Inputs& in) { return gather(in[0], 1, in[1]); }, {x, gidx}, "gather dim 1");
    // Backward: index_add (the CSR groups) and scatter_add (gather's backward), through autograd.
    const Tensor dy = randn({7, 41, 75}, dt, 34);
    check_on_gpu(
        [](const Inputs& in) {
          const Tensor leaf_x = in[0].detach().requires_grad_(true);
          sum(index_select(leaf_x, 1, in[1]) * in[2]).backward();
          return leaf_x.grad();
        },
        {x, sel, dy}, "index_select backward (index_add)");
    const Tensor dg = randn({7, 21, 75}, dt, 35);
    check_on_gpu(
        [](const Inputs& in) {
          const Tensor leaf_x = in[0].detach().requires_grad_(true);
          sum(gather(leaf_x, 1, in[1]) * in[2]).backward();
          return leaf_x.grad();
        },
        {x, gidx, dg}, "gather backward (scatter_add)");
  }
}

TEST_CASE("cuda indexing: embedding and scatter_add agree with the CPU, narrowed shapes and bfloat16 too",
          "[indexing][cuda]") {
  test::require_gpu();
  const Tensor w = randn({37, 70}, DType::f32, 40);
  const Tensor tokens = indices({5, 13}, 37, 41);
  check_on_gpu([](const Inputs& in) { return embedding(in[1], in[0]); }, {w, tokens}, "embedding");
  check_on_gpu(
      [](const Inputs& in) {
        const Tensor leaf_w = in[0].detach().requires_grad_(true);
        sum(embedding(in[1], leaf_w, 3) * embedding(in[1], leaf_w, 3)).backward();
        return leaf_w.grad();
      },
      {w, tokens}, "embedding backward with a padding row");
  // scatter_add with index shorter than x and src: the kernel works on a dense copy of the region.
  const Tensor x = randn({9, 40, 131}, DType::f32, 42);  // 9 x 130 columns: more than the small device's grid
  const Tensor src = randn({9, 26, 133}, DType::f32, 43);
  check_on_gpu([](const Inputs& in) { return scatter_add(in[0], 1, in[1], in[2]); },
               {x, indices({9, 25, 130}, 40, 44), src}, "scatter_add, narrowed");
  check_on_gpu([](const Inputs& in) { return scatter_add(in[0], 0, in[1], in[2]); },
               {x, indices({9, 26, 131}, 9, 45), src.narrow(2, 0, 131)}, "scatter_add dim 0, strided src");
  // bfloat16 on the GPU against float32 on the CPU: copies are exact, adds round once per element.
  const Tensor xb = x.to(kGpu, DType::bf16).to(Device::cpu(), DType::f32);  // values bfloat16 can hold
  const Tensor idx = indices({9, 40, 131}, 40, 46);
  const Tensor got = gather(xb.to(kGpu, DType::bf16), 1, idx.to(kGpu)).to(Device::cpu(), DType::f32);
  test::check_close(got, gather(xb, 1, idx), 0.0, 0.0, "gather bfloat16");
  const Tensor sum_b = scatter_add(zeros({9, 40, 131}, TensorOptions(DType::bf16).device(kGpu)), 1, idx.to(kGpu),
                                   xb.to(kGpu, DType::bf16));
  test::check_close(sum_b.to(Device::cpu(), DType::f32), scatter_add(zeros({9, 40, 131}, DType::f32), 1, idx, xb), 0.02,
                    0.02, "scatter_add bfloat16");
}

TEST_CASE("cuda indexing: a bad index on the GPU is an error before any kernel runs", "[indexing][cuda]") {
  test::require_gpu();
  const Tensor w = randn({5, 3}, DType::f32, 50).to(kGpu);
  CHECK_ERROR(embedding(from_vector(std::vector<int64_t>{1, 5}, Shape{2}, kGpu), w), "embedding", "index 5", "size 5",
              "position 1");
  CHECK_ERROR(embedding(from_vector(std::vector<int64_t>{1}, Shape{1}), w), "embedding", "index on cuda:0");
}
