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
