// tests/tools/test_bench_launch.cpp: bench/bench_launch.h -- how a multi-process benchmark starts its
// own ranks, or joins the job it is in -- run for real through tests/tools/probe/bench_launch_probe.cpp
// (a stand-in benchmark whose ranks are ringrun_probe), and once with bench_allreduce itself.
#include "launch_harness.h"

using namespace launch_test;

namespace {

Result run_bench_probe(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
  return Ringrun(args, extra_env, BENCH_LAUNCH_PROBE_PATH).finish();
}

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("bench launch: started by hand, a benchmark starts --nproc ranks of itself", "[ringrun][bench_launch]") {
  const Result r = run_bench_probe({"--nproc", "3"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(count_of(r.out, "bench_launch_probe: starting 3 ranks\n") == 1);
  CHECK(r.out.find("running as rank") == std::string::npos);  // its own ranks do not announce themselves
  CHECK(r.out.find("[rank ") == std::string::npos);           // its output is its own, unprefixed
  const std::map<int, Env> envs = probe_envs(r.out, /*prefixed=*/false);
  REQUIRE(envs.size() == 3);
  for (const auto& [rank, env] : envs) {
    CHECK(env.at("WORLD_SIZE") == "3");
    CHECK(env.at("LAUNCHER") == "bench_launch_probe");
    CHECK(env.at("MASTER_PORT") == envs.at(0).at("MASTER_PORT"));
  }
}

TEST_CASE("bench launch: a rank that stopped itself does not hang the job when another fails",
          "[ringrun][bench_launch]") {
  // Rank 1 stops itself (SIGSTOP), rank 0 then fails: the launcher's SIGTERM reaches rank 1 only
  // because a SIGCONT follows it. With SIGTERM alone the benchmark waited for rank 1 forever.
  const Result r = run_bench_probe({"kill@1", "19", "sleep@0", "300", "exit@0", "3"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 3);
  CHECK(std::regex_search(r.err, std::regex(R"(bench_launch_probe: rank 0 \(pid \d+\) exited with status 3)")));
  CHECK(r.elapsed_ms < 2500);  // well inside the 3 s grace period
  const std::vector<pid_t> pids = printed_pids(r.out);
  REQUIRE(pids.size() == 2);
  for (pid_t pid : pids) CHECK(stops_soon(pid));
}

TEST_CASE("bench launch: a stopped rank that ignores SIGTERM is SIGKILLed after the grace period",
          "[ringrun][bench_launch]") {
  const Result r = run_bench_probe({"ignore-term@1", "kill@1", "19", "sleep@0", "300", "exit@0", "3"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 3);
  CHECK(std::regex_search(r.err, std::regex(R"(bench_launch_probe: rank 1 \(pid \d+\) still running 3000 ms)")));
  CHECK(r.err.find("sending SIGKILL") != std::string::npos);
  CHECK(r.elapsed_ms >= 300 + 3000);
  CHECK(r.elapsed_ms < 6000);
  for (pid_t pid : printed_pids(r.out)) CHECK(stops_soon(pid));
}

TEST_CASE("bench launch: under ringrun, the benchmark is one of ringrun's ranks", "[ringrun][bench_launch]") {
  const Result r = run_ringrun({"--nproc-per-node", "2", "--master-port", "0", BENCH_LAUNCH_PROBE_PATH});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(count_of(r.out, "bench_launch_probe: running as rank 0 of 2 of the job ringrun started\n") == 1);
  CHECK(r.out.find("starting") == std::string::npos);
  const std::map<int, Env> envs = probe_envs(r.out);
  REQUIRE(envs.size() == 2);  // ringrun's two ranks, no more
  for (const auto& [rank, env] : envs) CHECK(env.at("WORLD_SIZE") == "2");
}

TEST_CASE("bench launch: --nproc that disagrees with the job's WORLD_SIZE is an error naming both",
          "[ringrun][bench_launch]") {
  const Result bad =
      run_ringrun({"--nproc-per-node", "2", "--master-port", "0", BENCH_LAUNCH_PROBE_PATH, "--nproc", "3"});
  INFO("stdout:\n" << bad.out << "stderr:\n" << bad.err);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("bench_launch_probe: --nproc 3 conflicts with WORLD_SIZE=2 of the job ringrun started") !=
        std::string::npos);
  const Result same =
      run_ringrun({"--nproc-per-node", "2", "--master-port", "0", BENCH_LAUNCH_PROBE_PATH, "--nproc", "2"});
  CHECK(same.exit_code == 0);
}

TEST_CASE("bench launch: in a job another launcher started, the benchmark is its rank and says so",
          "[ringrun][bench_launch]") {
  // What torchrun sets (it does not set RINGGRAD_LAUNCHER); the probe rank exits before any store is needed.
  const Result r = run_bench_probe({}, {"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("bench_launch_probe: running as rank 0 of 1 of the job in the environment") != std::string::npos);
  CHECK(probe_envs(r.out, /*prefixed=*/false).size() == 1);
}

TEST_CASE("bench launch: under Open MPI, MPICH, Intel MPI or srun, the benchmark is a rank of that job",
          "[ringrun][bench_launch]") {
  // The variables each launcher sets (no RANK: only init_process_group's other families say so).
  struct Case {
    std::vector<std::string> env;
    std::string expected;  // on stdout
    int probes;            // ranks that ran here: 1 when it joined the job, 2 when it started its own
  };
  const std::vector<Case> cases = {
      {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2"},
       "running as rank 0 of 2 of the job Open MPI's mpirun started\n",
       1},
      {{"PMI_RANK=0", "PMI_SIZE=3"}, "running as rank 0 of 3 of the job MPICH/Intel MPI started\n", 1},
      {{"SLURM_PROCID=0", "SLURM_NTASKS=4"}, "running as rank 0 of 4 of the job srun started\n", 1},
      {{"SLURM_PROCID=1", "SLURM_NTASKS=4"}, "", 1},  // a rank, but not rank 0: it says nothing
      // init_process_group reads Open MPI's numbers before Slurm's (srun running mpirun).
      {{"SLURM_PROCID=3", "SLURM_NTASKS=4", "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2"},
       "running as rank 0 of 2 of the job Open MPI's mpirun started\n",
       1},
      {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1", "TORCHELASTIC_RUN_ID=none"},
       "running as rank 0 of 2 of the job torchrun started\n",
       1},
      // A salloc shell: Slurm's job, but no task of it. One task, or one MPI process: start the ranks.
      {{"SLURM_NTASKS=4"}, "starting 2 ranks\n", 2},
      {{"SLURM_PROCID=0", "SLURM_NTASKS=1"}, "starting 2 ranks\n", 2},
      {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1"}, "starting 2 ranks\n", 2},
  };
  for (const Case& c : cases) {
    const Result r = run_bench_probe({}, c.env);
    std::string env_text;
    for (const std::string& e : c.env) env_text += e + " ";
    INFO("environment: " << env_text << "\nstdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.exit_code == 0);
    if (!c.expected.empty()) CHECK(count_of(r.out, "bench_launch_probe: " + c.expected) == 1);
    if (c.expected.empty()) CHECK(r.out.find("bench_launch_probe:") == std::string::npos);
    CHECK(count_of(r.out, "env RANK=") == c.probes);
  }
}

TEST_CASE("bench launch: --nproc that disagrees with an MPI job's size names the MPI variable",
          "[ringrun][bench_launch]") {
  const Result r = run_bench_probe({"--nproc", "3"}, {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("bench_launch_probe: --nproc 3 conflicts with OMPI_COMM_WORLD_SIZE=2 of the job Open MPI's "
                   "mpirun started") != std::string::npos);
}

TEST_CASE("bench launch: a launcher with SIGCHLD blocked still sees its ranks exit, and its mask comes back",
          "[ringrun][bench_launch]") {
  // The benchmark's ranks write straight to its stdout, so only SIGCHLD wakes its loop: blocked, as
  // some parents leave it, the launch used to wait forever for ranks that had long exited.
  Ringrun launch({"signals"}, {}, BENCH_LAUNCH_PROBE_PATH, SpawnSignals{{}, {SIGCHLD, SIGUSR2}});
  const Result r = launch.finish(4000);
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 0);
  const std::vector<SignalReport> reports = signal_reports(r.out);
  REQUIRE(reports.size() == 3);  // two ranks, then the launcher after its job
  for (const SignalReport& report : reports) {
    INFO(report.lead);
    CHECK(report.blocks(SIGCHLD));  // the ranks start with the mask their launcher was given
    CHECK(report.blocks(SIGUSR2));
  }
  CHECK(reports[2].lead == "bench_launch_probe: after the job: ");
  CHECK_FALSE(reports[2].ignores(SIGPIPE));  // ignored during the job only
}

#ifdef BENCH_ALLREDUCE_PATH
TEST_CASE("bench launch: bench_allreduce under ringrun runs one 2-rank job and prints one report",
          "[ringrun][bench_launch]") {
  const Result r = run_ringrun({"--nproc-per-node", "2", "--master-port", "0", BENCH_ALLREDUCE_PATH, "--transport",
                                "shm", "--min-bytes", "4", "--max-bytes", "16", "--warmup", "1", "--no-references"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(count_of(r.out, "bench_allreduce: running as rank 0 of 2 of the job ringrun started\n") == 1);
  CHECK(count_of(r.out, "# ringgrad bench_allreduce ") == 1);
  CHECK(r.out.find("[rank 0] # ringgrad bench_allreduce  backend=ring-shm  world=2 ") != std::string::npos);
  CHECK(r.out.find("[rank 1] ") == std::string::npos);  // rank 1 measures, rank 0 reports
}
#endif

#ifdef DP_VS_DDP_PATH
TEST_CASE("bench launch: dp_vs_ddp under ringrun refuses to be a rank and says why", "[ringrun][bench_launch]") {
  // It runs single and dp in one process and starts its own DDP processes: N copies of it under
  // ringrun would be N separate benchmarks on the same cores.
  const Result r = run_ringrun({"--nproc-per-node", "2", "--master-port", "0", DP_VS_DDP_PATH, "--layers", "4,3",
                                "--batch", "4", "--steps", "1", "--warmup", "0", "--no-torch"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 2);
  CHECK(
      std::regex_search(r.err, std::regex(R"(cannot be rank [01] of 2 of the job ringrun started; run it directly)")));
  CHECK(r.out.find("# single") == std::string::npos);
}
#endif
