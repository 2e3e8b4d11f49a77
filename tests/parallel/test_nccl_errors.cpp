// tests/parallel/test_nccl_errors.cpp: what init_process_group("nccl") says where it cannot start.
//
// Runs in every build, on any machine, and checks the message that fits this build and machine:
//   - built without NCCL (or without CUDA): "not in this build", and which backend to use instead;
//   - built with NCCL, but no GPU visible: the rank, the GPU it wanted, and that none is visible;
//   - built with NCCL, with GPUs: a LOCAL_RANK past the last GPU is named together with the count.
// The collectives themselves need a GPU: tests/cuda/test_nccl.cpp.
#include <catch2/catch.hpp>

#include <ringgrad/core/cuda.h>
#include "parallel/nccl/nccl_process_group.h"
#include <ringgrad/parallel/process_group.h>
#include "test_util.h"

using namespace ringgrad;
using ringgrad::test::MessageContainsAll;

namespace {

parallel::InitOptions single_rank(int local_rank) {
  parallel::InitOptions options = parallel::InitOptions().rank(0).world_size(1);
  options.local_rank() = local_rank;  // set here, so a LOCAL_RANK in the environment does not matter
  return options;
}

}  // namespace

TEST_CASE("nccl: init_process_group explains why it cannot start in this build or on this machine", "[nccl]") {
  parallel::destroy_process_group();  // whatever an earlier test in this process left
  const int gpus = cuda_device_count();
  if (!parallel::nccl_available()) {
    CHECK_THROWS_MATCHES(parallel::init_process_group("nccl", single_rank(0)), Error,
                         MessageContainsAll({"init_process_group", "\"nccl\"", "not in this build", "\"ring\""}));
  } else if (gpus == 0) {
    CHECK_THROWS_MATCHES(parallel::init_process_group("nccl", single_rank(0)), Error,
                         MessageContainsAll({"init_process_group(\"nccl\")", "rank 0", "cuda:0", "LOCAL_RANK 0",
                                             "no CUDA GPU is visible", "\"ring\""}));
  } else {
    // A GPU machine: cuda:0 works (tests/cuda/test_nccl.cpp); one past the last GPU must not.
    CHECK_THROWS_MATCHES(parallel::init_process_group("nccl", single_rank(gpus)), Error,
                         MessageContainsAll({"init_process_group(\"nccl\")", "rank 0",
                                             "LOCAL_RANK " + std::to_string(gpus), "one process per GPU"}));
  }
  // A group that failed to start does not become the default group.
  CHECK(parallel::default_process_group() == nullptr);
}

TEST_CASE("nccl: a LOCAL_RANK past the visible GPUs is refused before NCCL is touched", "[nccl]") {
  if (!parallel::nccl_available()) {
    CHECK_THROWS_MATCHES(parallel::init_process_group("nccl", single_rank(7)), Error,
                         MessageContainsAll({"not in this build"}));
    return;
  }
  const int gpus = cuda_device_count();
  const int local_rank = gpus + 7;
  if (gpus == 0) {
    CHECK_THROWS_MATCHES(parallel::init_process_group("nccl", single_rank(local_rank)), Error,
                         MessageContainsAll({"cuda:" + std::to_string(local_rank), "no CUDA GPU is visible"}));
  } else {
    CHECK_THROWS_MATCHES(
        parallel::init_process_group("nccl", single_rank(local_rank)), Error,
        MessageContainsAll({"LOCAL_RANK " + std::to_string(local_rank), "cuda:0..cuda:" + std::to_string(gpus - 1),
                            "one process per GPU", "set LOCAL_RANK"}));
  }
}
