// tests/parallel/test_ddp.cpp: DistributedDataParallel across real processes.
//
// Each test starts `ringgrad_ddp_worker` as the ranks of a job (spawn_ranks.h, or ringrun) on this
// machine. The worker compares DDP, rank by rank, with one process training on the whole global batch
// (see its header comment); these tests check that every rank says so, and that the failures DDP must
// report are reported.
#include <catch2/catch.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "spawn_ranks.h"

using ringgrad::test::all_output;
using ringgrad::test::all_succeeded;
using ringgrad::test::JobResult;
using ringgrad::test::spawn_ranks;

namespace {

const std::string kWorker = RINGGRAD_DDP_WORKER_PATH;

}  // namespace

TEST_CASE("ddp: 2, 3 and 4 processes reproduce one process on the global batch (float64, SGD and AdamW)", "[ddp]") {
  const int world = GENERATE(2, 3, 4);
  const std::string opt = GENERATE(std::string("sgd"), std::string("adamw"));
  // A cap of 0 makes one bucket per parameter (6); 100 MB puts every parameter in one bucket.
  const std::string cap = GENERATE(std::string("0"), std::string("100"));
  const JobResult job = spawn_ranks(world, kWorker, {"train", "opt=" + opt, "cap=" + cap, "first_cap=" + cap});
  INFO(all_output(job));
  CHECK(all_succeeded(job, /*say_ok=*/true));
  const std::string buckets = cap == "100" ? "buckets 1," : "buckets 6,";
  for (const auto& r : job.ranks) CHECK(r.output.find(buckets) != std::string::npos);
}

TEST_CASE("ddp: float32 training matches one process within 1e-5, over TCP too", "[ddp]") {
  const std::string transport = GENERATE(std::string("shm"), std::string("tcp"));
  const JobResult job = spawn_ranks(3, kWorker, {"train", "dtype=f32", "opt=adamw", "transport=" + transport});
  INFO(all_output(job));
  CHECK(all_succeeded(job, /*say_ok=*/true));
}

// gradient_as_bucket_view is on by default, so the tests above run with it; view=0 is the copying
// variant (.grad a tensor of its own, copied into the bucket and back).
TEST_CASE("ddp: without gradient_as_bucket_view and non-overlapped, DDP trains the same", "[ddp]") {
  const std::vector<std::string> variant =
      GENERATE(std::vector<std::string>{"view=0"}, std::vector<std::string>{"overlap=0", "cap=0"});
  std::vector<std::string> args = {"train"};
  args.insert(args.end(), variant.begin(), variant.end());
  const JobResult job = spawn_ranks(2, kWorker, args);
  INFO(all_output(job));
  CHECK(all_succeeded(job, /*say_ok=*/true));
}

// With gradient_as_bucket_view (the default) backward writes the gradients into the buckets
// themselves (a linear layer's weight gradient is its GEMM's output there): accumulation across no_sync
// steps, which then adds into the bucket in place, and unused parameters must come out as without it.
TEST_CASE("ddp: no_sync accumulation and unused parameters are right with and without the bucket view", "[ddp]") {
  const std::string view = GENERATE(std::string("view=1"), std::string("view=0"));
  const JobResult accumulated = spawn_ranks(GENERATE(2, 3), kWorker, {"accumulate", "cap=0", view});
  INFO(all_output(accumulated));
  CHECK(all_succeeded(accumulated, /*say_ok=*/true));
  const JobResult unused = spawn_ranks(2, kWorker, {"unused", "find_unused=1", view});
  INFO(all_output(unused));
  CHECK(all_succeeded(unused, /*say_ok=*/true));
}

// The default is the bucket view: every .grad is its slot after each synchronised backward (the
// worker checks it), also after a step in which the user replaced .grad with tensors of their own,
// whose sums DDP must then copy into the buckets, average, and make .grad the slot again.
TEST_CASE("ddp: by default .grad is the bucket slot, and a .grad the user replaced is averaged all the same", "[ddp]") {
  const std::vector<std::string> variant =
      GENERATE(std::vector<std::string>{"train"}, std::vector<std::string>{"train", "replace_grad=1"},
               std::vector<std::string>{"train", "replace_grad=1", "view=0"});
  const JobResult job = spawn_ranks(2, kWorker, variant);
  INFO(all_output(job));
  CHECK(all_succeeded(job, /*say_ok=*/true));
}

TEST_CASE("ddp: 4 micro-steps with no_sync on the first 3 equal one step on the 4x batch", "[ddp]") {
  const int world = GENERATE(2, 3);
  const JobResult job = spawn_ranks(world, kWorker, {"accumulate", "cap=0"});
  INFO(all_output(job));
  CHECK(all_succeeded(job, /*say_ok=*/true));
}

TEST_CASE("ddp: an unused parameter is an error naming it, and find_unused_parameters fixes it", "[ddp]") {
  const JobResult broken = spawn_ranks(2, kWorker, {"unused"});
  INFO(all_output(broken));
  for (const auto& r : broken.ranks) {
    CHECK(r.exit_code == 3);
    CHECK(r.output.find("spare.weight") != std::string::npos);
    CHECK(r.output.find("find_unused_parameters(true)") != std::string::npos);
  }
  const JobResult fixed = spawn_ranks(2, kWorker, {"unused", "find_unused=1"});
  INFO(all_output(fixed));
  CHECK(all_succeeded(fixed, /*say_ok=*/true));
}

TEST_CASE("ddp: a no-grad forward, a user collective and no_sync with unused parameters keep ranks in step", "[ddp]") {
  const JobResult job = spawn_ranks(GENERATE(2, 3), kWorker, {"quiet_failures"});
  INFO(all_output(job));
  CHECK(all_succeeded(job, /*say_ok=*/true));
}

TEST_CASE("ddp: the first bucket's all-reduce starts before backward ends", "[ddp]") {
  const JobResult job = spawn_ranks(2, kWorker, {"overlap"});
  INFO(all_output(job));
  CHECK(all_succeeded(job, /*say_ok=*/true));
}

TEST_CASE("ddp: ranks with different models fail at construction, naming the parameter", "[ddp]") {
  const JobResult job = spawn_ranks(2, kWorker, {"mismatch"});
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  for (const auto& r : job.ranks) {
    CHECK(r.exit_code == 3);
    CHECK(r.output.find("fc1.weight") != std::string::npos);
    CHECK(r.output.find("[34, 9]") != std::string::npos);
  }
}

TEST_CASE("ddp: a checkpoint from rank 0 loads into a plain model that predicts the same", "[ddp]") {
  const ringgrad::test::TempDir dir;
  const JobResult job = spawn_ranks(2, kWorker, {"checkpoint", "path=" + dir.file("model.safetensors")});
  INFO(all_output(job));
  CHECK(all_succeeded(job, /*say_ok=*/true));
}

TEST_CASE("ddp: under ringrun, a rank dying mid-training fails the job fast, with no process left", "[ddp]") {
  // ringrun's own output goes to a file; its exit status and the survivors' errors are checked.
  const ringgrad::test::TempDir dir;
  const std::string log = dir.file("ringrun.log");
  const std::string command = std::string(RINGRUN_PATH) + " --nproc-per-node 3 --master-port 0 --grace-ms 2000 " +
                              kWorker + " die > " + log + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(("timeout 60 " + command).c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(output);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK(WEXITSTATUS(status) != 124);  // not the timeout's
  CHECK(seconds < 20);
  CHECK(output.find("rank 1") != std::string::npos);
  CHECK(output.find("killed by signal 9") != std::string::npos);
  // No worker of this job is left: pgrep exits 1 when it finds nothing.
  // (The last letter in brackets keeps pgrep from matching the shell that runs it.)
  const std::string pattern = kWorker.substr(0, kWorker.size() - 1) + "[" + kWorker.back() + "] die";
  CHECK(std::system(("pgrep -f '" + pattern + "' > /dev/null").c_str()) != 0);
}
