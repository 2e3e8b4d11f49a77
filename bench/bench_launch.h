// bench/bench_launch.h: a benchmark that starts itself as the ranks of a job, like
// torch.multiprocessing.spawn -- so one command measures a multi-process run.
//
// Started without RANK in the environment, launch_ranks() runs this same program `nproc` times with
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a MASTER_PORT set, plus BENCH_RESULT_FILE (a
// file rank 0 writes its results to, for the parent to report), and waits for all of them.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace bench {

inline bool is_rank() { return std::getenv("RANK") != nullptr; }

// Returns the worst exit status of the ranks (0: all succeeded).
inline int launch_ranks(int nproc, char** argv, const std::string& result_file) {
  const int port = 20000 + static_cast<int>(::getpid() % 20000);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < nproc; ++rank) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.push_back(*e);
    for (const std::string& kv :
         {"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(nproc),
          std::string("MASTER_ADDR=127.0.0.1"), "MASTER_PORT=" + std::to_string(port), "BENCH_RESULT_FILE=" + result_file})
      env.push_back(kv);
    std::vector<char*> envp;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0)
      throw std::runtime_error("cannot start rank " + std::to_string(rank));
    pids.push_back(pid);
  }
  int worst = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    worst = std::max(worst, WIFEXITED(status) ? WEXITSTATUS(status) : 128);
  }
  return worst;
}

// The parent's side of a multi-process benchmark: start the ranks with a fresh result file, and
// once all of them succeeded, hand the file to `report`; the file is removed afterwards. Returns
// the first failing rank's status, else report's.
inline int launch_and_report(const std::string& name, int nproc, char** argv,
                             const std::function<int(const std::string& result_file)>& report) {
  const std::string result_file = "/tmp/ringgrad_" + name + "_" + std::to_string(::getpid()) + ".txt";
  std::remove(result_file.c_str());
  const int status = launch_ranks(nproc, argv, result_file);
  const int rc = status != 0 ? status : report(result_file);
  if (status != 0) std::fprintf(stderr, "%s: a rank failed (status %d)\n", name.c_str(), status);
  std::remove(result_file.c_str());
  return rc;
}

}  // namespace bench
