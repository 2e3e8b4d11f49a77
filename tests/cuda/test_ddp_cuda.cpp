// tests/cuda/test_ddp_cuda.cpp: DistributedDataParallel with CUDA tensors reproduces one process.
//
// Two processes on cuda:0 with the ring backend (NCCL refuses two ranks on one GPU): gradients are
// staged through pinned host memory, averaged by the ring, and copied back. The worker
// (tests/parallel/worker/ddp_worker.cpp, scenario train device=cuda) compares each rank's DDP
// replica with a CPU model trained on the whole global batch.
//
// Label `cuda`: these tests FAIL without a GPU (a skipped GPU test reads as a passed one).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <ringgrad/core/base/fp16.h>
#include <ringgrad/parallel/comm_hook.h>
#include "cuda_test_util.h"
#include "parallel/ring/ring_process_group.h"
#include "parallel/spawn_ranks.h"

using ringgrad::test::all_output;
using ringgrad::test::JobResult;
using ringgrad::test::spawn_ranks;

TEST_CASE("ddp on cuda:0: 2 processes over the ring reproduce one process on the global batch", "[ddp][cuda]") {
  ringgrad::test::require_gpu();
  // float32 only: the CUDA backend has no float64 GEMM.
  const JobResult job = spawn_ranks(2, RINGGRAD_DDP_WORKER_PATH, {"train", "device=cuda", "dtype=f32", "cap=0"});
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  for (const auto& r : job.ranks) {
    CHECK(r.exit_code == 0);
    CHECK(r.output.find(": ok") != std::string::npos);
  }
}

// Each rank on its own GPU, as a real job runs. On the emulator, RINGGRAD_EMU_EXCLUSIVE gives each
// device to one process (exclusive-process compute mode): a rank that creates a CUDA context on any
// GPU but its own -- a device guard "restoring" cuda:0 on a thread that never chose one, pinned
// memory allocated with no device current -- fails there with cudaErrorDevicesUnavailable, as it
// would on such a GPU. (A real GPU ignores the variable; the test then checks the training.)
TEST_CASE("ddp on cuda:LOCAL_RANK: 2 processes, one GPU each, reproduce one process and touch only their GPU",
          "[ddp][cuda][multi-gpu]") {
  ringgrad::test::require_gpus(2);
  const std::string exclusive = "ddp-local-" + std::to_string(::getpid());
  const JobResult job = spawn_ranks(2, RINGGRAD_DDP_WORKER_PATH, {"train", "device=cuda-local", "dtype=f32", "cap=0"},
                                    {{"RINGGRAD_EMU_EXCLUSIVE", exclusive}});
  const char* tmp = std::getenv("TMPDIR");
  for (int d = 0; d < 16; ++d)  // the emulator's lock files, one per device a rank took
    std::remove((std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ringgrad-emu-" + exclusive + "-cuda" +
                 std::to_string(d) + ".lock")
                    .c_str());
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  for (const auto& r : job.ranks) {
    CHECK(r.exit_code == 0);
    CHECK(r.output.find(": ok") != std::string::npos);
  }
}

namespace {
// DDP over backend "nccl": `ranks` processes, one GPU each (cuda:LOCAL_RANK), against one process on
// the global batch. The emulator stands in for NCCL there and gets as many emulated GPUs as ranks.
void ddp_on_nccl(int ranks, const std::vector<std::string>& extra_args) {
  std::vector<std::pair<std::string, std::string>> env = {{"BACKEND", "nccl"}};
#ifdef RINGGRAD_CUDA_EMU
  env.emplace_back("RINGGRAD_EMU_DEVICES", std::to_string(ranks));
#else
  ringgrad::test::require_gpus(ranks);
#endif
  std::vector<std::string> args = {"train", "device=cuda-local", "dtype=f32", "cap=0"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const JobResult job = spawn_ranks(ranks, RINGGRAD_DDP_WORKER_PATH, args, env);
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  for (const auto& r : job.ranks) {
    CHECK(r.exit_code == 0);
    CHECK(r.output.find(": ok") != std::string::npos);
  }
}
}  // namespace

TEST_CASE("ddp on nccl: 2 processes, one GPU each, reproduce one process", "[ddp][nccl][cuda][multi-gpu]") {
  ringgrad::test::require_gpus(2);
  ddp_on_nccl(2, {});
}

TEST_CASE("ddp on nccl: 4 processes, a bucket per tensor, reproduce one process", "[ddp][nccl][cuda][multi-gpu]") {
  ringgrad::test::require_gpus(2);  // and 4 on a real machine (ddp_on_nccl)
  ddp_on_nccl(4, {});
}

TEST_CASE("ddp on nccl: 2 processes with the fp16 hook train within float16's rounding",
          "[ddp][nccl][cuda][multi-gpu]") {
  ringgrad::test::require_gpus(2);
  ddp_on_nccl(2, {"hook=fp16"});
}

TEST_CASE("ddp on cuda:0: the fp16 hook rounds a CUDA bucket as the host does", "[ddp][cuda]") {
  ringgrad::test::require_gpu();
  using namespace ringgrad;
  // A group of one: the division by the world size is by 1, so the bucket comes back as
  // float32(float16(g)) -- cast by a kernel on the GPU, bit for bit the host's float_to_fp16.
  auto pg = std::make_shared<parallel::RingProcessGroup>(nullptr, 0, 1);
  const Tensor g = ringgrad::test::seeded_host({1000}, DType::f32, 31, -3.0, 3.0);
  parallel::GradBucket bucket{0, g.to(Device::cuda(0))};
  parallel::fp16_compress_hook()(*pg, bucket)->wait();
  CHECK(bucket.buffer.device() == Device::cuda(0));
  CHECK(bucket.buffer.dtype() == DType::f32);
  std::vector<float> want = g.to_vector<float>();
  for (float& v : want) v = fp16_to_float(float_to_fp16(v));
  CHECK(bucket.buffer.to_vector<float>() == want);
}

TEST_CASE("ddp on cuda:0: 2 processes with the fp16 hook train within float16's rounding of one process",
          "[ddp][cuda]") {
  ringgrad::test::require_gpu();
  const JobResult job =
      spawn_ranks(2, RINGGRAD_DDP_WORKER_PATH, {"train", "device=cuda", "dtype=f32", "cap=0", "hook=fp16"});
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  for (const auto& r : job.ranks) {
    CHECK(r.exit_code == 0);
    CHECK(r.output.find(": ok") != std::string::npos);
  }
}
