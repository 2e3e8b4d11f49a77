// bench/bench_launch.h: a benchmark that starts itself as the ranks of a job, like
// torch.multiprocessing.spawn -- so one command measures a multi-process run.
//
// launch_ranks() runs this same program `nproc` times with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a MASTER_PORT set, plus BENCH_RESULT_FILE (a file rank 0
// writes its results to, for the parent to report), and waits for all of them.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace bench {

// A rank is a process this launcher started: it always sets BENCH_RESULT_FILE. (Not RANK: a user may
// run the benchmark from a shell inside torchrun or SLURM, where RANK is already set.)
inline bool is_rank() { return std::getenv("BENCH_RESULT_FILE") != nullptr; }

// Returns the worst exit status of the ranks (0: all succeeded). When one rank fails, the others
// are stopped (SIGTERM) rather than left waiting in a collective for the process group's timeout.
inline int launch_ranks(int nproc, char** argv, const std::string& result_file) {
  const int port = 20000 + static_cast<int>(::getpid() % 20000);
  // The variables the launcher sets replace any the caller exported: getenv returns the first
  // match, so an inherited WORLD_SIZE=3 would otherwise win and the ranks would wait for a third.
  const std::vector<std::string> ours = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                         "MASTER_PORT", "BENCH_RESULT_FILE"};
  std::vector<std::string> inherited;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (std::find(ours.begin(), ours.end(), key) == ours.end()) inherited.push_back(kv);
  }
  std::vector<pid_t> pids;
  auto stop_all = [&pids] {
    for (pid_t pid : pids) ::kill(pid, SIGTERM);
  };
  for (int rank = 0; rank < nproc; ++rank) {
    std::vector<std::string> env = inherited;
    for (const std::string& kv :
         {"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(nproc),
          "LOCAL_WORLD_SIZE=" + std::to_string(nproc), std::string("MASTER_ADDR=127.0.0.1"),
          "MASTER_PORT=" + std::to_string(port), "BENCH_RESULT_FILE=" + result_file})
      env.push_back(kv);
    std::vector<char*> envp;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) {
      stop_all();
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      throw std::runtime_error("cannot start rank " + std::to_string(rank));
    }
    pids.push_back(pid);
  }
  int worst = 0;
  for (size_t left = pids.size(); left > 0;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);  // whichever rank ends first
    if (pid < 0) break;
    if (std::find(pids.begin(), pids.end(), pid) == pids.end()) continue;  // not one of ours
    --left;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    if (code != 0 && worst == 0) stop_all();  // the first failure: the others cannot finish
    worst = std::max(worst, code);
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
