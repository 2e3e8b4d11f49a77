// tests/parallel/test_process_group.cpp: the launch variables, a group of one, and bad arguments.
//
// Everything here runs in this process: a group of one needs no store and no peers, so it checks
// the API's semantics (a collective of one rank) and its argument errors. Real multi-process runs
// are in test_ring.cpp.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"
#include "parallel/process_group.h"
#include "parallel/ring/ring_process_group.h"
#include "test_util.h"

using namespace ringgrad;
using parallel::InitOptions;
using parallel::read_launch_info;

namespace {

// Sets (or, with nullptr, removes) environment variables for one scope.
class ScopedEnv {
 public:
  ScopedEnv(std::vector<std::pair<std::string, const char*>> vars) {
    for (auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      if (value) ::setenv(name.c_str(), value, 1);
      else ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    for (auto& [name, value] : saved_) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace

TEST_CASE("read_launch_info: reads the torchrun variables, explicit options win", "[ring]") {
  ScopedEnv env({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "10.0.0.7"},
                 {"MASTER_PORT", "29511"}});
  const parallel::LaunchInfo info = read_launch_info({});
  CHECK(info.rank == 2);
  CHECK(info.world_size == 4);
  CHECK(info.local_rank == 0);
  CHECK(info.master_addr == "10.0.0.7");
  CHECK(info.master_port == 29511);
  const parallel::LaunchInfo forced = read_launch_info(InitOptions().with_rank(1).with_master("127.0.0.1", 4000));
  CHECK(forced.rank == 1);
  CHECK(forced.master_addr == "127.0.0.1");
  CHECK(forced.master_port == 4000);
}

TEST_CASE("read_launch_info: a missing or invalid variable says which, and how to launch", "[ring]") {
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", nullptr}});
    CHECK_ERROR(read_launch_info({}), "WORLD_SIZE is not set", "ringrun");
  }
  {
    ScopedEnv env({{"RANK", nullptr}, {"WORLD_SIZE", "2"}});
    CHECK_ERROR(read_launch_info({}), "RANK is not set", "ringrun");
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", nullptr}});
    CHECK_ERROR(read_launch_info({}), "MASTER_PORT is not set");
  }
  {
    ScopedEnv env({{"RANK", "three"}, {"WORLD_SIZE", "4"}});
    CHECK_ERROR(read_launch_info({}), "RANK", "integer", "three");
  }
  {
    ScopedEnv env({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "29500"}});
    CHECK_ERROR(read_launch_info({}), "0 <= RANK < WORLD_SIZE", "4");
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
    CHECK_ERROR(read_launch_info({}), "MASTER_PORT", "1..65535", "70000");
  }
  ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  CHECK_ERROR(parallel::init_process_group("gloo"), "backend", "ring", "nccl", "gloo");
}

TEST_CASE("a group of one: every collective leaves the value a single rank implies", "[ring]") {
  ScopedEnv env({{"RANK", nullptr}, {"WORLD_SIZE", nullptr}});
  auto pg = parallel::init_process_group("ring", InitOptions().with_rank(0).with_world_size(1));
  CHECK(pg->rank() == 0);
  CHECK(pg->size() == 1);
  CHECK(parallel::default_process_group() == pg);
  CHECK(std::string(std::static_pointer_cast<parallel::RingProcessGroup>(pg)->transport_name()) == "none");

  Tensor t = from_vector<float>({1.5f, -2.0f, 3.0f});
  auto work = pg->all_reduce(t, parallel::ReduceOp::Avg);
  work->wait();
  CHECK(work->is_completed());
  CHECK(work->end_time() >= work->start_time());
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
  CHECK(parallel::default_process_group() == nullptr);
}

TEST_CASE("ring collectives: bad arguments fail at the call, naming the collective", "[ring]") {
  parallel::RingProcessGroup pg(nullptr, 0, 1);
  CHECK_ERROR(pg.all_reduce(Tensor()), "all_reduce", "undefined");
  CHECK_ERROR(pg.all_reduce(zeros({4, 6}).t()), "all_reduce", "contiguous", "[6, 4]");
  CHECK_ERROR(pg.all_reduce(zeros({3}, DType::i64)), "all_reduce", "float32, float64 or bfloat16", "int64");
  CHECK_ERROR(pg.broadcast(zeros({3}), 1), "broadcast", "root", "0..0", "1");
  CHECK_ERROR(pg.all_gather({zeros({3}), zeros({3})}, zeros({3})), "all_gather", "1 output", "got 2");
  CHECK_ERROR(pg.all_gather({zeros({4})}, zeros({3})), "all_gather", "output 0", "[3]", "[4]");
  CHECK_ERROR(pg.reduce_scatter(zeros({3}), {zeros({3}, DType::f64)}), "reduce_scatter", "input 0", "float64");
  CHECK_ERROR(parallel::RingProcessGroup(nullptr, 0, 2), "ring", "store");
  CHECK_ERROR(parallel::RingProcessGroup(nullptr, 0, 1, parallel::RingOptions{std::chrono::seconds(1), "udp"}),
              "transport", "udp");
  CHECK_ERROR(parallel::RingProcessGroup(nullptr, 3, 2), "rank 3 of 2");
}
