// tests/parallel/test_backend_registry.cpp: the process-group backend registry -- a backend the user
// registers is made by init_process_group, names are registered once, an unknown name lists the
// registered ones -- and where each backend wants a collective's tensors (collective_device).
//
// Every job here is a job of one, so no store and no peers are needed. The registry is global to
// the process, so each test registers names of its own.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ringgrad/parallel/process_group.h>
#include "parallel/ring/ring_process_group.h"
#include "test_util.h"

using namespace ringgrad;
using namespace std::chrono_literals;
using parallel::BackendContext;
using parallel::InitOptions;

namespace {

// A backend that runs nothing: enough to see which factory init_process_group called, and with what.
class FakeGroup final : public parallel::ProcessGroup {
 public:
  FakeGroup(int rank, int size) : ProcessGroup(rank, size, 1000ms) {}
  const char* backend_name() const override { return "fake"; }
  std::shared_ptr<parallel::Work> all_reduce(const Tensor&, parallel::ReduceOp) override { return done(); }
  std::shared_ptr<parallel::Work> broadcast(const Tensor&, int) override { return done(); }
  std::shared_ptr<parallel::Work> all_gather(const std::vector<Tensor>&, const Tensor&) override { return done(); }
  std::shared_ptr<parallel::Work> reduce_scatter(const Tensor&, const std::vector<Tensor>&,
                                                 parallel::ReduceOp) override {
    return done();
  }
  std::shared_ptr<parallel::Work> barrier() override { return done(); }

 private:
  static std::shared_ptr<parallel::Work> done() {
    auto work = std::make_shared<parallel::Work>("fake");
    work->mark_done();
    return work;
  }
};

InitOptions single_rank() { return InitOptions().rank(0).world_size(1); }

bool registered(const std::string& name) {
  const std::vector<std::string> names = parallel::registered_process_group_backends();
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

TEST_CASE("process_group backends: ring is built in, and nccl exactly when this build has it", "[process_group]") {
  CHECK(registered("ring"));
  CHECK(registered("nccl") == parallel::nccl_available());
  CHECK(registered("gloo") == parallel::gloo_available());
  const std::vector<std::string> names = parallel::registered_process_group_backends();
  CHECK(std::is_sorted(names.begin(), names.end()));
}

TEST_CASE("process_group backends: a registered backend is made by init_process_group, with the launch values",
          "[process_group]") {
  parallel::destroy_process_group();
  std::optional<BackendContext> seen;
  parallel::register_process_group_backend("test-fake", [&seen](const BackendContext& context) {
    seen = context;
    return std::make_shared<FakeGroup>(context.info.rank, context.info.world_size);
  });
  CHECK(registered("test-fake"));

  auto pg = parallel::init_process_group("test-fake", single_rank().timeout(1234ms).transport("tcp"));
  REQUIRE(seen.has_value());
  CHECK(std::string(pg->backend_name()) == "fake");
  CHECK(parallel::default_process_group() == pg);
  CHECK(seen->store == nullptr);  // a job of one meets nobody
  CHECK(seen->info.rank == 0);
  CHECK(seen->info.world_size == 1);
  CHECK(seen->info.timeout == 1234ms);
  CHECK(seen->options.transport() == "tcp");
  pg->all_reduce(zeros({2}))->wait();
  // A backend that does not say otherwise gets a collective's tensors on the host.
  CHECK(pg->collective_device(Device::cuda(1)) == Device::cpu());
  parallel::destroy_process_group();
}

TEST_CASE("process_group backends: a name is registered once, and empty names and factories are refused",
          "[process_group]") {
  auto make = [](const BackendContext& context) { return std::make_shared<FakeGroup>(0, 1); };
  parallel::register_process_group_backend("test-twice", make);
  CHECK_ERROR(parallel::register_process_group_backend("test-twice", make), "register_process_group_backend",
              "\"test-twice\"", "already registered");
  CHECK_ERROR(parallel::register_process_group_backend("ring", make), "\"ring\"", "already registered");
  CHECK_ERROR(parallel::register_process_group_backend("", make), "register_process_group_backend", "name");
  CHECK_ERROR(parallel::register_process_group_backend("test-empty", parallel::ProcessGroupFactory()), "\"test-empty\"",
              "factory");
  CHECK_FALSE(registered("test-empty"));
}

TEST_CASE("process_group backends: an unknown name is refused, listing the registered ones", "[process_group]") {
  parallel::destroy_process_group();
  parallel::register_process_group_backend("test-listed",
                                           [](const BackendContext&) { return std::make_shared<FakeGroup>(0, 1); });
  CHECK_ERROR(parallel::init_process_group("mpi", single_rank()), "init_process_group: expected backend", "\"ring\"",
              "\"test-listed\"", "nccl", "register_process_group_backend", "got \"mpi\"");
  CHECK(parallel::default_process_group() == nullptr);
}

TEST_CASE("process_group backends: a factory that returns no group is an error naming the backend", "[process_group]") {
  parallel::destroy_process_group();
  parallel::register_process_group_backend(
      "test-null", [](const BackendContext&) { return std::shared_ptr<parallel::ProcessGroup>(); });
  CHECK_ERROR(parallel::init_process_group("test-null", single_rank()), "init_process_group", "\"test-null\"",
              "no process group");
  CHECK(parallel::default_process_group() == nullptr);
}

TEST_CASE("process_group backends: ring wants a collective's tensors on the host, whatever the model's device",
          "[process_group]") {
  parallel::RingProcessGroup pg(nullptr, 0, 1);
  CHECK(pg.collective_device(Device::cpu()) == Device::cpu());
  CHECK(pg.collective_device(Device::cuda(0)) == Device::cpu());
}
