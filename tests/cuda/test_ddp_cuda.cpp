// tests/cuda/test_ddp_cuda.cpp: DistributedDataParallel with CUDA tensors reproduces one process.
//
// Two processes on cuda:0 with the ring backend (NCCL refuses two ranks on one GPU): gradients are
// staged through pinned host memory, averaged by the ring, and copied back. The worker
// (tests/parallel/worker/ddp_worker.cpp, scenario train device=cuda) compares each rank's DDP
// replica with a CPU model trained on the whole global batch.
//
// Label `cuda`: these tests FAIL without a GPU (a skipped GPU test reads as a passed one).
#include <catch2/catch.hpp>

#include "cuda_test_util.h"
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
