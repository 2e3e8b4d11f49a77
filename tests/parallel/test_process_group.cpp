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

#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/parallel/process_group.h>
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
      if (value)
        ::setenv(name.c_str(), value, 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {  // in reverse: a name listed twice gets back its value from before the first
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace

TEST_CASE("read_launch_info: reads the torchrun variables, explicit options win", "[ring]") {
  ScopedEnv env(
      {{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "10.0.0.7"}, {"MASTER_PORT", "29511"}});
  const parallel::LaunchInfo info = read_launch_info({});
  CHECK(info.rank == 2);
  CHECK(info.world_size == 4);
  CHECK(info.local_rank == 0);
  CHECK(info.master_addr == "10.0.0.7");
  CHECK(info.master_port == 29511);
  const parallel::LaunchInfo forced =
      read_launch_info(InitOptions().rank(1).master_addr("127.0.0.1").master_port(4000));
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
  CHECK_ERROR(parallel::init_process_group("mpi"), "backend", "ring", "nccl", "mpi");
}

namespace {

// Every launcher variable read_launch_info knows, unset: each test below sets only its launcher's.
std::vector<std::pair<std::string, const char*>> no_launcher() {
  std::vector<std::pair<std::string, const char*>> vars;
  for (const char* name : {"RANK",
                           "WORLD_SIZE",
                           "LOCAL_RANK",
                           "MASTER_ADDR",
                           "MASTER_PORT",
                           "OMPI_COMM_WORLD_RANK",
                           "OMPI_COMM_WORLD_SIZE",
                           "OMPI_COMM_WORLD_LOCAL_RANK",
                           "OMPI_COMM_WORLD_LOCAL_SIZE",
                           "PMI_RANK",
                           "PMI_SIZE",
                           "MPI_LOCALRANKID",
                           "SLURM_PROCID",
                           "SLURM_NTASKS",
                           "SLURM_LOCALID",
                           "SLURM_JOB_NODELIST",
                           "SLURM_NODELIST",
                           "RINGGRAD_TIMEOUT",
                           "TORCHELASTIC_USE_AGENT_STORE",
                           "SLURM_STEP_NODELIST",
                           "SLURM_JOB_ID",
                           "SLURM_STEP_ID",
                           "MPI_LOCALNRANKS",
                           "OMPI_MCA_ess_base_jobid",
                           "PMIX_NAMESPACE",
                           "TORCHELASTIC_RUN_ID"})
    vars.emplace_back(name, nullptr);
  return vars;
}

std::vector<std::pair<std::string, const char*>> with(std::vector<std::pair<std::string, const char*>> vars,
                                                      std::vector<std::pair<std::string, const char*>> set) {
  for (auto& [name, value] : set) vars.emplace_back(name, value);  // later entries win in ScopedEnv
  return vars;
}

}  // namespace

TEST_CASE("read_launch_info: Open MPI, MPICH and Slurm variables, with defaults for address and port", "[ring]") {
  {
    ScopedEnv env(with(no_launcher(), {{"OMPI_COMM_WORLD_RANK", "1"},
                                       {"OMPI_COMM_WORLD_SIZE", "2"},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
    const parallel::LaunchInfo info = read_launch_info({});
    CHECK(info.rank == 1);
    CHECK(info.world_size == 2);
    CHECK(info.local_rank == 1);
    CHECK(info.master_addr == "127.0.0.1");
    CHECK(info.master_port == 29500);
    CHECK(info.launcher == "Open MPI");
  }
  {
    ScopedEnv env(with(no_launcher(), {{"PMI_RANK", "3"},
                                       {"PMI_SIZE", "4"},
                                       {"MPI_LOCALRANKID", "1"},
                                       {"MASTER_ADDR", "10.1.2.3"},
                                       {"MASTER_PORT", "4242"}}));
    const parallel::LaunchInfo info = read_launch_info({});
    CHECK(info.rank == 3);
    CHECK(info.world_size == 4);
    CHECK(info.local_rank == 1);
    CHECK(info.master_addr == "10.1.2.3");
    CHECK(info.master_port == 4242);
  }
  {
    ScopedEnv env(with(no_launcher(), {{"SLURM_PROCID", "5"},
                                       {"SLURM_NTASKS", "8"},
                                       {"SLURM_LOCALID", "1"},
                                       {"SLURM_JOB_NODELIST", "gpu[007-010,12],login1"}}));
    const parallel::LaunchInfo info = read_launch_info({});
    CHECK(info.rank == 5);
    CHECK(info.world_size == 8);
    CHECK(info.local_rank == 1);
    CHECK(info.master_addr == "gpu007");
    CHECK(info.master_port == 29500);
    CHECK(info.launcher == "Slurm");
  }
}

TEST_CASE("read_launch_info: srun starting an MPI job fills in what PMI leaves out, and job ids", "[ring]") {
  // srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE, and Slurm's own numbers agree with them.
  ScopedEnv env(with(no_launcher(), {{"PMI_RANK", "9"},
                                     {"PMI_SIZE", "16"},
                                     {"SLURM_PROCID", "9"},
                                     {"SLURM_NTASKS", "16"},
                                     {"SLURM_LOCALID", "1"},
                                     {"SLURM_JOB_ID", "4242"},
                                     {"SLURM_STEP_ID", "3"},
                                     {"SLURM_STEP_NODELIST", "n[05-12]"},
                                     {"SLURM_JOB_NODELIST", "n[01-12]"}}));
  const parallel::LaunchInfo info = read_launch_info({});
  CHECK(info.rank == 9);
  CHECK(info.local_rank == 1);       // SLURM_LOCALID, not the global rank
  CHECK(info.master_addr == "n05");  // the step's first node
  CHECK(info.launcher == "MPICH/Intel MPI (PMI)");
  {
    ScopedEnv slurm_only(with({}, {{"PMI_RANK", nullptr}, {"PMI_SIZE", nullptr}}));
    CHECK(read_launch_info({}).job_id == "slurm 4242.3");
  }
  ScopedEnv hydra(with(no_launcher(), {{"PMI_RANK", "0"}, {"PMI_SIZE", "4"}, {"MPI_LOCALNRANKS", "2"}}));
  CHECK_ERROR(read_launch_info({}), "spans several hosts", "MPI_LOCALNRANKS", "MASTER_ADDR");
}

TEST_CASE("read_launch_info: launchers nest in a fixed order, and rank and size never mix families", "[ring]") {
  // srun running mpirun running torchrun: the innermost launcher (the one that set RANK) wins.
  ScopedEnv env(with(no_launcher(), {{"SLURM_PROCID", "0"},
                                     {"SLURM_NTASKS", "1"},
                                     {"OMPI_COMM_WORLD_RANK", "1"},
                                     {"OMPI_COMM_WORLD_SIZE", "2"},
                                     {"RANK", "3"},
                                     {"WORLD_SIZE", "4"},
                                     {"MASTER_PORT", "29501"}}));
  CHECK(read_launch_info({}).rank == 3);
  CHECK(read_launch_info({}).world_size == 4);
  {
    ScopedEnv no_rank(with({}, {{"RANK", nullptr}, {"WORLD_SIZE", nullptr}}));
    CHECK(read_launch_info({}).rank == 1);  // then Open MPI, before Slurm
    CHECK(read_launch_info({}).world_size == 2);
    ScopedEnv half(with({}, {{"OMPI_COMM_WORLD_SIZE", nullptr}}));
    CHECK_ERROR(read_launch_info({}), "OMPI_COMM_WORLD_SIZE is not set");  // not Slurm's size
  }
}

TEST_CASE("read_launch_info: a multi-host Open MPI job needs MASTER_ADDR, and Slurm node lists name their first host",
          "[ring]") {
  {
    ScopedEnv env(
        with(no_launcher(),
             {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
    CHECK_ERROR(read_launch_info({}), "several hosts", "MASTER_ADDR");
  }
  CHECK(parallel::first_slurm_host("node01") == "node01");
  CHECK(parallel::first_slurm_host("node[01-04]") == "node01");
  CHECK(parallel::first_slurm_host("a3,b[1-2]") == "a3");
  CHECK(parallel::first_slurm_host("rack[2-3]-n[009,11]-ib") == "rack2-n009-ib");
  CHECK_ERROR(parallel::first_slurm_host("node[01-04"), "SLURM_JOB_NODELIST", "node[01-04");
  CHECK_ERROR(parallel::first_slurm_host(""), "SLURM_JOB_NODELIST");
  CHECK_ERROR(parallel::first_slurm_host("node[]"), "SLURM_JOB_NODELIST", "empty");
}

TEST_CASE("read_launch_info: timeouts come from the code, else RINGGRAD_TIMEOUT, else 300 s and 60 s for setup",
          "[ring]") {
  using std::chrono::milliseconds;
  ScopedEnv env(with(no_launcher(), {{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  CHECK(read_launch_info({}).timeout == milliseconds(300000));
  CHECK(read_launch_info({}).setup_timeout == milliseconds(60000));
  {
    ScopedEnv timeout(with({}, {{"RINGGRAD_TIMEOUT", "2.5"}}));
    CHECK(read_launch_info({}).timeout == milliseconds(2500));
    CHECK(read_launch_info({}).setup_timeout == milliseconds(2500));
    // Code wins, as with every other field; a timeout set in code also bounds setup.
    const parallel::LaunchInfo coded = read_launch_info(InitOptions().timeout(milliseconds(9000)));
    CHECK(coded.timeout == milliseconds(9000));
    CHECK(coded.setup_timeout == milliseconds(9000));
    const parallel::LaunchInfo both =
        read_launch_info(InitOptions().timeout(milliseconds(9000)).setup_timeout(milliseconds(700)));
    CHECK(both.setup_timeout == milliseconds(700));
  }
  for (const char* bad : {"0", "-3", "abc", "10s", "", "1e99", "nan"}) {
    ScopedEnv timeout(with({}, {{"RINGGRAD_TIMEOUT", bad}}));
    INFO("RINGGRAD_TIMEOUT=" << bad);
    if (*bad == '\0') {
      CHECK(read_launch_info({}).timeout == milliseconds(300000));  // empty counts as unset
    } else {
      CHECK_ERROR(read_launch_info({}), "RINGGRAD_TIMEOUT", "seconds", bad);
    }
  }
}

TEST_CASE("a group of one: every collective leaves the value a single rank implies", "[ring]") {
  ScopedEnv env({{"RANK", nullptr}, {"WORLD_SIZE", nullptr}});
  auto pg = parallel::init_process_group("ring", InitOptions().rank(0).world_size(1));
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
  CHECK_ERROR(pg.all_reduce(zeros({3}, DType::i64)), "all_reduce", "float32, float64, bfloat16 or float16", "int64");
  CHECK_ERROR(pg.broadcast(zeros({3}), 1), "broadcast", "root", "0..0", "1");
  CHECK_ERROR(pg.all_gather({zeros({3}), zeros({3})}, zeros({3})), "all_gather", "1 output", "got 2");
  CHECK_ERROR(pg.all_gather({zeros({4})}, zeros({3})), "all_gather", "output 0", "[3]", "[4]");
  CHECK_ERROR(pg.reduce_scatter(zeros({3}), {zeros({3}, DType::f64)}), "reduce_scatter", "input 0", "float64");
  CHECK_ERROR(parallel::RingProcessGroup(nullptr, 0, 2), "ring", "store");
  CHECK_ERROR(parallel::RingProcessGroup(nullptr, 0, 1,
                                         parallel::RingOptions().timeout(std::chrono::seconds(1)).transport("udp")),
              "transport", "udp");
  CHECK_ERROR(parallel::RingProcessGroup(nullptr, 3, 2), "rank 3 of 2");
}
