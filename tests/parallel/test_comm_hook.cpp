// tests/parallel/test_comm_hook.cpp: DDP's communication hooks (parallel/comm_hook.h).
//
// In one process (a group of one, whose all-reduce changes nothing) a hook's own work is visible
// exactly: what it does to the bucket, how often and in what order it runs. Across processes,
// test_ddp.cpp's workers train with hook=bf16 against one process on the global batch.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include <ringgrad/core/base/bf16.h>
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

TEST_CASE("comm hook: bf16 sends each bucket as bfloat16 and casts the average back", "[ddp][comm_hook]") {
  std::vector<Tensor> reference;
  const auto model = model_and_grads(parallel::DDPOptions().comm_hook(parallel::bf16_compress_hook()), &reference);
  const auto params = model->parameters();
  bool any_rounded = false;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor grad = params[i].grad();
    CHECK(grad.dtype() == DType::f32);
    // Exactly float32(bfloat16(g)): the compression is the only change a group of one makes.
    std::vector<float> rounded = reference[i].to_vector<float>();
    for (float& v : rounded) v = bf16_to_float(float_to_bf16(v));
    CHECK(grad.to_vector<float>() == rounded);
    any_rounded = any_rounded || grad.to_vector<float>() != reference[i].to_vector<float>();
  }
  CHECK(any_rounded);  // else this test could not tell the hook from the default
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

TEST_CASE("comm hook: names select hooks, and fp16 is refused pointing at bf16", "[ddp][comm_hook]") {
  CHECK(parallel::comm_hook_named("none") != nullptr);
  CHECK(parallel::comm_hook_named("bf16") != nullptr);
  CHECK_ERROR(parallel::comm_hook_named("fp16"), "fp16", "float16", "bf16");
  CHECK_ERROR(parallel::comm_hook_named("int8"), "comm hook", "'none' or 'bf16'", "int8");
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
