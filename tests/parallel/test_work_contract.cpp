// tests/parallel/test_work_contract.cpp: the Work contract of work_contract.h on the "ring" backend;
// test_gloo.cpp runs the same code on "gloo" (in builds with it), tests/cuda/test_nccl.cpp on "nccl".
#include <catch2/catch.hpp>

#include "parallel/ring/ring_process_group.h"
#include "parallel/work_contract.h"

using namespace ringgrad;

TEST_CASE("work contract: ring", "[ring]") {
  test::ContractBackend ring;
  ring.make = [](const std::shared_ptr<parallel::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
    return std::make_shared<parallel::RingProcessGroup>(store, rank, size, parallel::RingOptions().timeout(timeout));
  };
  ring.device = [](int) { return Device::cpu(); };
  test::check_work_contract(ring);
}
