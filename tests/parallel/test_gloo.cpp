// tests/parallel/test_gloo.cpp: the "gloo" backend (built only with libgloo-dev).
//
// The multi-process tests run the ring's own workers with BACKEND=gloo: the same collectives checked
// against the same answers (dist_worker.cpp), DDP against one process on the global batch
// (ddp_worker.cpp), and the same faults. The in-process tests check what fails at the call, and
// that a group whose peer is gone fails once, naming gloo, and then at once with that reason.
#include <catch2/catch.hpp>

#include <algorithm>
#include <future>
#include <string>
#include <thread>

#include <ringgrad/ringgrad.h>

#include "parallel/gloo/gloo_process_group.h"
#include "parallel/work_contract.h"
#include "spawn_ranks.h"
#include "test_util.h"

using namespace ringgrad;
using parallel::InitOptions;
using ringgrad::test::all_output;
using ringgrad::test::all_succeeded;
using ringgrad::test::JobResult;
using ringgrad::test::spawn_ranks;

namespace {

const std::string kDistWorker = RINGGRAD_DIST_WORKER_PATH;
const std::string kDdpWorker = RINGGRAD_DDP_WORKER_PATH;

// Options given in code win over the launch variables, so these tests ignore any RANK set outside.
std::shared_ptr<parallel::ProcessGroup> group_of_one() {
  return parallel::init_process_group("gloo", InitOptions().rank(0).world_size(1));
}

}  // namespace

TEST_CASE("gloo: is registered in this build", "[gloo]") {
  CHECK(parallel::gloo_available());
  const auto names = parallel::registered_process_group_backends();
  CHECK(std::find(names.begin(), names.end(), "gloo") != names.end());
}

TEST_CASE("gloo: every collective, dtype and length is exact for 2 and 3 ranks", "[gloo]") {
  const int world = GENERATE(2, 3);
  const JobResult job = spawn_ranks(world, kDistWorker, {"collectives"}, {{"BACKEND", "gloo"}});
  INFO(all_output(job));
  CHECK(all_succeeded(job, /*say_ok=*/true));
  for (const auto& r : job.ranks) CHECK(r.output.find("transport gloo") != std::string::npos);
}

TEST_CASE("gloo: DDP over gloo reproduces one process on the global batch (float64, SGD and AdamW)", "[gloo]") {
  const int world = GENERATE(2, 3);
  const std::string opt = GENERATE(std::string("sgd"), std::string("adamw"));
  const JobResult job = spawn_ranks(world, kDdpWorker, {"train", "opt=" + opt}, {{"BACKEND", "gloo"}});
  INFO(all_output(job));
  CHECK(all_succeeded(job, /*say_ok=*/true));
}

TEST_CASE("gloo: a rank killed mid all-reduce makes the others fail fast, naming gloo", "[gloo]") {
  const int world = GENERATE(2, 3, 4);
  // Repeated: a survivor that writes to the dead rank's socket gets SIGPIPE, which -- until the
  // backend blocked it in Gloo's threads -- killed the survivor in about one run in six.
  const int attempt = GENERATE(range(0, 4));
  INFO("attempt " << attempt);
  // A 60 s timeout: the survivors must notice the death itself, long before the deadline.
  const JobResult job =
      spawn_ranks(world, kDistWorker, {"die"}, {{"BACKEND", "gloo"}, {"VICTIM", "1"}, {"TIMEOUT_MS", "60000"}},
                  std::chrono::seconds(30));
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  CHECK(job.seconds < 10);
  CHECK(job.ranks[1].signal == 9);
  for (int r = 0; r < world; ++r) {
    if (r == 1) continue;
    CHECK(job.ranks[r].exit_code == 3);
    CHECK(job.ranks[r].output.find("gloo all_reduce(avg") != std::string::npos);
    CHECK(job.ranks[r].output.find("on rank " + std::to_string(r)) != std::string::npos);
  }
}

TEST_CASE("gloo: a stopped rank makes the others fail at the timeout, never hang", "[gloo]") {
  // SIGSTOP keeps the victim's connections open: only the deadline can tell.
  const test::TempDir dir;
  const JobResult job = spawn_ranks(
      3, kDistWorker, {"stop"}, {{"BACKEND", "gloo"}, {"VICTIM", "2"}, {"TIMEOUT_MS", "2000"}, {"PID_DIR", dir.str()}},
      std::chrono::seconds(30));
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  CHECK(job.seconds < 9);
  for (int r = 0; r < 2; ++r) {
    CHECK(job.ranks[r].exit_code == 3);
    CHECK(job.ranks[r].output.find("gloo all_reduce(sum") != std::string::npos);
  }
}

TEST_CASE("gloo: a group of one leaves the values a single rank implies", "[gloo]") {
  auto pg = group_of_one();
  CHECK(std::string(pg->backend_name()) == "gloo");
  CHECK(pg->collective_device(Device::cuda(0)) == Device::cpu());
  Tensor t = from_vector<float>({1.5f, -2.0f, 3.0f});
  pg->all_reduce(t, parallel::ReduceOp::Avg)->wait();
  CHECK(t.to_vector<float>() == std::vector<float>{1.5f, -2.0f, 3.0f});
  pg->broadcast(t, 0)->wait();
  std::vector<Tensor> outs = {zeros({3})};
  pg->all_gather(outs, t)->wait();
  CHECK(outs[0].to_vector<float>() == t.to_vector<float>());
  Tensor out = zeros({3});
  pg->reduce_scatter(out, {t}, parallel::ReduceOp::Sum)->wait();
  CHECK(out.to_vector<float>() == t.to_vector<float>());
  pg->barrier()->wait();
  parallel::destroy_process_group();
}

TEST_CASE("gloo: bad arguments fail at the call, naming the collective", "[gloo]") {
  auto pg = group_of_one();
  CHECK_ERROR(pg->all_reduce(zeros({4}, DType::i64)), "gloo all_reduce", "float32, float64, bfloat16 or float16",
              "int64");
  CHECK_ERROR(pg->reduce_scatter(zeros({4}, DType::u8), {zeros({4}, DType::u8)}), "gloo reduce_scatter", "uint8");
  CHECK_ERROR(pg->all_gather({zeros({3}), zeros({3})}, zeros({3})), "gloo all_gather", "expected 1 output tensors",
              "got 2");
  CHECK_ERROR(pg->all_gather({zeros({4})}, zeros({3})), "gloo all_gather", "output 0", "[3]", "[4]");
  CHECK_ERROR(pg->reduce_scatter(zeros({3}), {zeros({3}), zeros({3})}), "gloo reduce_scatter",
              "expected 1 input tensors", "got 2");
  CHECK_ERROR(pg->broadcast(zeros({3}), 1), "gloo broadcast", "root rank in 0..0", "got 1");
  CHECK_ERROR(pg->all_reduce(zeros({3, 4}).transpose(0, 1)), "gloo all_reduce", "contiguous");
  CHECK_ERROR(pg->all_reduce(Tensor()), "gloo all_reduce", "undefined");
  parallel::destroy_process_group();
}

TEST_CASE("gloo: a peer gone fails the next collective naming gloo, and later ones at once with that reason",
          "[gloo]") {
  // Two ranks in this process, on two threads: rank 1's group is destroyed, which closes its
  // connections, and rank 0's next all-reduce must fail -- long before its 20 s timeout.
  const int port = test::free_port();
  auto make = [port](int rank) {
    return parallel::init_process_group("gloo", InitOptions()
                                                    .rank(rank)
                                                    .world_size(2)
                                                    .master_addr("127.0.0.1")
                                                    .master_port(port)
                                                    .timeout(std::chrono::seconds(20)));
  };
  auto second = std::async(std::launch::async, make, 1);
  auto pg0 = make(0);
  auto pg1 = second.get();
  Tensor a = full({5}, 2.0), b = full({5}, 3.0);
  auto w1 = pg1->all_reduce(b, parallel::ReduceOp::Sum);
  pg0->all_reduce(a, parallel::ReduceOp::Sum)->wait();
  w1->wait();
  CHECK(a.to_vector<float>() == std::vector<float>(5, 5.0f));
  CHECK(b.to_vector<float>() == std::vector<float>(5, 5.0f));

  parallel::destroy_process_group();  // the default group is one of the two
  pg1.reset();                        // rank 1 leaves: its connections close
  const auto start = std::chrono::steady_clock::now();
  CHECK_ERROR(pg0->all_reduce(a)->wait(), "gloo all_reduce(sum, 5 x float32 on cpu", "on rank 0 of 2");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK_ERROR(pg0->barrier()->wait(), "gloo barrier()", "broken by an earlier failure",
              "gloo all_reduce(sum, 5 x float32 on cpu", "on rank 0 of 2");
  parallel::destroy_process_group();
}

// The Work contract every backend meets (work_contract.h), as the ring's and nccl's tests run it.
TEST_CASE("work contract: gloo", "[gloo]") {
  test::ContractBackend gloo;
  gloo.prefix = "gloo ";
  gloo.make = [](const std::shared_ptr<parallel::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
    return parallel::make_gloo_process_group(store, rank, size, parallel::GlooOptions().timeout(timeout));
  };
  gloo.device = [](int) { return Device::cpu(); };
  test::check_work_contract(gloo);
}
