// tests/parallel/test_comm_hook.cpp: DDP's communication hooks (parallel/comm_hook.h).
//
// In one process (a group of one, whose all-reduce changes nothing) a hook's own work is visible
// exactly: what it does to the bucket, how often and in what order it runs. Across processes,
// the DDP workers train with hook=bf16 and hook=fp16 against one process on the global batch, and
// check that fp16's division before the sum keeps in-range averages of out-of-range sums finite.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <ringgrad/core/base/bf16.h>
#include <ringgrad/core/base/fp16.h>
#include <ringgrad/ringgrad.h>
#include "parallel/ring/ring_process_group.h"
#include "spawn_ranks.h"
#include "test_util.h"

using namespace ringgrad;

namespace {

std::shared_ptr<parallel::ProcessGroup> group_of_one() {
  return std::make_shared<parallel::RingProcessGroup>(nullptr, 0, 1);
}

// A model and a batch whose gradients are not representable in bfloat16 (most float32 values are not).
std::shared_ptr<nn::MLP> model_and_grads(const parallel::DDPOptions& options, std::vector<Tensor>* reference) {
  manual_seed(3);
  auto plain = std::make_shared<nn::MLP>(std::vector<int64_t>{7, 13, 5});
  manual_seed(3);
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{7, 13, 5});
  const Tensor x = randn({6, 7}, DType::f32, /*seed=*/9);
  const Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0}, {6});
  cross_entropy(plain->forward(x), y).backward();
  for (const Tensor& p : plain->parameters()) reference->push_back(p.grad());
  parallel::DistributedDataParallel<nn::MLP> ddp(model, group_of_one(), options);
  cross_entropy(ddp(x), y).backward();
  return model;
}

}  // namespace

TEST_CASE("comm hook: the default leaves the gradients as one process computes them", "[ddp][comm_hook]") {
  std::vector<Tensor> reference;
  const auto model = model_and_grads(parallel::DDPOptions(), &reference);
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    CHECK(params[i].grad().to_vector<float>() == reference[i].to_vector<float>());
}

namespace {

// In a group of one the compression is the only change a hook makes (fp16's division by the world
// size is by 1): every gradient must be exactly float32(narrow(g)), and some must have been rounded.
void check_rounded_like(const parallel::CommHook& hook, float (*round_trip)(float)) {
  std::vector<Tensor> reference;
  const auto model = model_and_grads(parallel::DDPOptions().comm_hook(hook), &reference);
  const auto params = model->parameters();
  bool any_rounded = false;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor grad = params[i].grad();
    CHECK(grad.dtype() == DType::f32);
    std::vector<float> rounded = reference[i].to_vector<float>();
    for (float& v : rounded) v = round_trip(v);
    CHECK(grad.to_vector<float>() == rounded);
    any_rounded = any_rounded || grad.to_vector<float>() != reference[i].to_vector<float>();
  }
  CHECK(any_rounded);  // else this test could not tell the hook from the default
}

}  // namespace

TEST_CASE("comm hook: bf16 sends each bucket as bfloat16 and casts the average back", "[ddp][comm_hook]") {
  check_rounded_like(parallel::bf16_compress_hook(), [](float v) { return bf16_to_float(float_to_bf16(v)); });
}

TEST_CASE("comm hook: fp16 sends each bucket as float16 and casts the average back", "[ddp][comm_hook]") {
  // float16 keeps 3 more bits than bfloat16, so its rounding is finer -- but there is one.
  check_rounded_like(parallel::fp16_compress_hook(), [](float v) { return fp16_to_float(float_to_fp16(v)); });
}

TEST_CASE("comm hook: fp16 keeps float16's range -- tiny gradients flush to zero, huge ones overflow",
          "[ddp][comm_hook]") {
  // The caveat the hook documents, in a group of one: float64 and float16 buckets too.
  auto pg = group_of_one();
  const std::vector<double> values = {1.0, 1e-9, -1e-9, 1e-6, 65504.0, 65520.0, -1e5, 0.1};
  for (const DType dt : {DType::f32, DType::f64}) {
    parallel::GradBucket bucket{0, from_vector(values, {8}).to(dt)};
    parallel::fp16_compress_hook()(*pg, bucket)->wait();
    CHECK(bucket.buffer.dtype() == dt);
    const std::vector<double> got = bucket.buffer.to(DType::f64).to_vector<double>();
    INFO("dtype " << dt);
    CHECK(got[0] == 1.0);
    CHECK(got[1] == 0.0);  // below 2^-25: zero
    CHECK(got[2] == 0.0);
    CHECK(std::signbit(got[2]));             // of its sign
    CHECK(got[3] == std::ldexp(17.0, -24));  // a subnormal: 1e-6 is 16.78 units of 2^-24
    CHECK(got[4] == 65504.0);                // the largest finite float16
    CHECK(got[5] == INFINITY);               // the midpoint to 2^16 and up
    CHECK(got[6] == -INFINITY);
    CHECK(got[7] == fp16_to_float(float_to_fp16(0.1f)));
  }
  // A float64 bucket is rounded to float16 once, not through float32: 1 + 2^-11 + 2^-40 is just above
  // the midpoint between 1 and the next float16, 1 + 2^-10, so it rounds up; through float32 it would
  // first lose the 2^-40, land on the midpoint, and tie to even: 1.
  parallel::GradBucket wide{0, from_vector(std::vector<double>{1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                                                               -(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)),
                                                               1.0 + std::ldexp(1.0, -11)},
                                           {3})};
  parallel::fp16_compress_hook()(*pg, wide)->wait();
  const std::vector<double> once = wide.buffer.to_vector<double>();
  CHECK(once[0] == 1.0 + std::ldexp(1.0, -10));
  CHECK(once[1] == -(1.0 + std::ldexp(1.0, -10)));
  CHECK(once[2] == 1.0);  // exactly the midpoint: ties to even
  // A float16 bucket goes as it is (divided by 1 here): its bits come back unchanged.
  Tensor half = empty({3}, DType::f16);
  const uint16_t bits[] = {0x3555, 0x8001, 0x7bff};
  std::memcpy(half.data(), bits, sizeof bits);
  parallel::GradBucket bucket{0, half};
  parallel::fp16_compress_hook()(*pg, bucket)->wait();
  CHECK(std::memcmp(bucket.buffer.data(), bits, sizeof bits) == 0);
}

TEST_CASE("comm hook: fp16 refuses a bucket of another dtype, naming it", "[ddp][comm_hook]") {
  auto pg = group_of_one();
  parallel::GradBucket bf16_bucket{0, empty({4}, DType::bf16)};
  CHECK_ERROR(parallel::fp16_compress_hook()(*pg, bf16_bucket), "fp16_compress_hook",
              "float32, float64 or float16 bucket", "bfloat16");
  parallel::GradBucket labels{0, zeros({4}, DType::i64)};
  CHECK_ERROR(parallel::fp16_compress_hook()(*pg, labels), "fp16_compress_hook", "int64");
}

TEST_CASE("comm hook: one's own hook runs once per bucket per step, in bucket order", "[ddp][comm_hook]") {
  auto seen = std::make_shared<std::vector<int>>();
  parallel::CommHook hook = [seen](parallel::ProcessGroup& pg, parallel::GradBucket& bucket) {
    seen->push_back(bucket.index);
    // Doubling, then the default: visible in .grad, so the hook's result is what DDP uses.
    mul_(bucket.buffer, 2.0);
    return pg.all_reduce(bucket.buffer, parallel::ReduceOp::Avg);
  };
  std::vector<Tensor> reference;
  // A cap of 0: one bucket per parameter (4: two weights, two biases).
  const auto model =
      model_and_grads(parallel::DDPOptions().bucket_cap_mb(0).first_bucket_cap_mb(0).comm_hook(hook), &reference);
  CHECK(*seen == std::vector<int>{0, 1, 2, 3});
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto got = params[i].grad().to_vector<float>(), want = reference[i].to_vector<float>();
    for (size_t j = 0; j < got.size(); ++j) CHECK(got[j] == 2 * want[j]);
  }
}

TEST_CASE("comm hook: a continuation runs once, after the collective, and its error reaches every waiter",
          "[ddp][comm_hook]") {
  auto pg = group_of_one();
  Tensor t = full({4}, 3.0);
  int runs = 0;
  auto work = parallel::then(pg->all_reduce(t), [&runs] { ++runs; });
  work->wait();
  work->wait();
  CHECK(runs == 1);
  CHECK(work->is_completed());
  auto failing = parallel::then(pg->all_reduce(t), [] { throw Error("the cast back failed"); });
  CHECK_ERROR(failing->wait(), "the cast back failed");
  CHECK_ERROR(failing->wait(), "the cast back failed");
}

TEST_CASE("comm hook: names select hooks, and an unknown name lists the known ones", "[ddp][comm_hook]") {
  CHECK(parallel::comm_hook_named("none") != nullptr);
  CHECK(parallel::comm_hook_named("bf16") != nullptr);
  CHECK(parallel::comm_hook_named("fp16") != nullptr);
  CHECK_ERROR(parallel::comm_hook_named("int8"), "comm hook", "'none', 'bf16' or 'fp16'", "int8");
  CHECK_ERROR(parallel::DistributedDataParallel<nn::MLP>(std::make_shared<nn::MLP>(std::vector<int64_t>{2, 2}),
                                                         group_of_one(), parallel::DDPOptions().comm_hook(nullptr)),
              "comm hook", "empty");
}

TEST_CASE("comm hook: with bf16, 3 processes train within bfloat16's rounding of one process", "[ddp][comm_hook]") {
  const ringgrad::test::JobResult job =
      ringgrad::test::spawn_ranks(3, RINGGRAD_DDP_WORKER_PATH, {"train", "dtype=f32", "opt=sgd", "hook=bf16"});
  INFO(ringgrad::test::all_output(job));
  CHECK(ringgrad::test::all_succeeded(job, /*say_ok=*/true));
}

TEST_CASE("comm hook: with fp16, 3 processes train within float16's rounding of one process", "[ddp][comm_hook]") {
  const ringgrad::test::JobResult job =
      ringgrad::test::spawn_ranks(3, RINGGRAD_DDP_WORKER_PATH, {"train", "dtype=f32", "opt=sgd", "hook=fp16"});
  INFO(ringgrad::test::all_output(job));
  CHECK(ringgrad::test::all_succeeded(job, /*say_ok=*/true));
}

TEST_CASE("comm hook: fp16 divides before the sum, so averages of sums past 65504 stay finite", "[ddp][comm_hook]") {
  // Each rank's gradients are in range, their sum over 3 ranks is not; the worker also checks that
  // an all-reduce of the same float16 values without the division overflows.
  const ringgrad::test::JobResult job = ringgrad::test::spawn_ranks(3, RINGGRAD_DDP_WORKER_PATH, {"fp16_range"});
  INFO(ringgrad::test::all_output(job));
  CHECK(ringgrad::test::all_succeeded(job, /*say_ok=*/true));
}
