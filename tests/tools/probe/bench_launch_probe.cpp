// tests/tools/probe/bench_launch_probe.cpp: a stand-in for a multi-process benchmark, for
// tests/tools/test_bench_launch.cpp. It makes the decision a benchmark's main() makes
// (bench/bench_launch.h): started by hand it starts --nproc ranks of itself (default 2); inside a
// job -- ringrun's, or its own -- it is a rank, and becomes ringrun_probe (exec, same pid and
// environment), which prints its environment and runs the steps. As the launcher, once its job is
// done, it prints "bench_launch_probe: after the job: signals ..." (signal_report.h), to show what
// the launch gave back.
//
//   bench_launch_probe [--nproc N] [probe steps...]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../../bench/bench_launch.h"
#include "signal_report.h"

int main(int argc, char** argv) {
  int nproc = 2;
  int first_step = 1;
  if (argc > 2 && std::string(argv[1]) == "--nproc") {
    nproc = std::atoi(argv[2]);
    first_step = 3;
  }
  try {
    if (const std::optional<int> status = bench::start_ranks_unless_in_job("bench_launch_probe", nproc, argc, argv)) {
      std::printf("bench_launch_probe: after the job: %s", probe::signal_report().c_str());
      return *status;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_launch_probe: %s\n", e.what());
    return 1;
  }
  std::fflush(stdout);  // the "running as rank" line must not be lost to exec
  std::vector<char*> probe_argv = {const_cast<char*>(RINGRUN_PROBE_PATH)};
  for (int i = first_step; i < argc; ++i) probe_argv.push_back(argv[i]);
  probe_argv.push_back(nullptr);
  execv(RINGRUN_PROBE_PATH, probe_argv.data());
  std::perror("bench_launch_probe: cannot exec " RINGRUN_PROBE_PATH);
  return 127;
}
