// bench/bench_launch.h: a multi-process benchmark runs as a rank of the job it is in, or, started
// by hand, starts that job itself -- like torch.multiprocessing.spawn, so one command measures a
// multi-process run.
//
//   ./build/bench/bench_allreduce --nproc 4             # starts 4 ranks of itself
//   ringrun --nproc-per-node 4 ./build/bench/bench_allreduce   # is one of ringrun's 4 ranks
//
// A process is a rank of a job when the variables init_process_group reads say so, read in its
// order (parallel/launch_info.cpp): RANK and WORLD_SIZE -- with MASTER_ADDR and MASTER_PORT, which
// ringrun, torchrun and this file's own launch set -- else Open MPI's OMPI_COMM_WORLD_RANK/_SIZE,
// else MPICH's and Intel MPI's PMI_RANK/PMI_SIZE, else srun's SLURM_PROCID/SLURM_NTASKS. MPI and
// Slurm do not set RANK; the library finds rank 0's store for them on its own. Those three count
// only with a world size > 1: `srun -n1 ./bench --nproc 4` and a salloc shell (SLURM_NTASKS, but
// no SLURM_PROCID) still start their own ranks. Its ranks run the benchmark and rank 0 prints the
// report. The launch is tools/launch/launcher.h, the one ringrun uses: the first rank to fail is
// named, and the others get SIGTERM (and SIGCONT, for a stopped rank), then SIGKILL of their whole
// process group when they are still there after the grace period.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tools/launch/launcher.h"

namespace bench {

// The job this process is a rank of, from the environment. `launcher` names who started it
// ("ringrun", "torchrun", "Open MPI's mpirun", ...), empty when nothing says (RANK and WORLD_SIZE
// set by hand or by an unknown launcher); `size_variable` is where world_size came from.
struct JobEnvironment {
  int rank = 0;
  int world_size = 1;
  std::string launcher;
  std::string size_variable = "WORLD_SIZE";

  // "the job ringrun started", for messages.
  std::string description() const {
    return launcher.empty() ? "the job in the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)"
                            : "the job " + launcher + " started";
  }
};

// An environment variable holding an integer, or nullopt (unset, empty, or not an integer).
inline std::optional<int> env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < INT_MIN || value > INT_MAX) return std::nullopt;
  return static_cast<int>(value);
}

inline bool env_set(const char* name) { return std::getenv(name) != nullptr && *std::getenv(name) != '\0'; }

inline std::optional<JobEnvironment> job_from_environment() {
  // The family init_process_group will read is the first whose rank variable is set; a benchmark
  // that judged by another one would join a job its library does not see.
  if (env_set("RANK") || env_set("WORLD_SIZE")) {
    for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
      if (!env_set(name)) return std::nullopt;
    JobEnvironment job;
    job.rank = env_int("RANK").value_or(0);
    job.world_size = env_int("WORLD_SIZE").value_or(0);
    const char* launcher = std::getenv("RINGGRAD_LAUNCHER");
    if (launcher != nullptr && *launcher != '\0')
      job.launcher = launcher;
    else if (env_set("TORCHELASTIC_RUN_ID"))  // every torchrun worker has it
      job.launcher = "torchrun";
    return job;
  }
  struct Family {
    const char* rank;
    const char* size;
    const char* launcher;
  };
  static const Family kFamilies[] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"},
                                     {"PMI_RANK", "PMI_SIZE", "MPICH/Intel MPI"},
                                     {"SLURM_PROCID", "SLURM_NTASKS", "srun"}};
  for (const Family& f : kFamilies) {
    if (!env_set(f.rank)) continue;
    const std::optional<int> rank = env_int(f.rank), size = env_int(f.size);
    if (!rank || !size || *size <= 1) return std::nullopt;
    JobEnvironment job;
    job.rank = *rank;
    job.world_size = *size;
    job.launcher = f.launcher;
    job.size_variable = f.size;
    return job;
  }
  return std::nullopt;
}

// Whether `flag` is on the command line, as "--flag value" or "--flag=value".
inline bool flag_given(int argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == flag || arg.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

// This program again, with the same arguments: what its ranks run.
inline std::vector<std::string> this_program(int argc, char** argv) {
  std::vector<std::string> command = {"/proc/self/exe"};
  command.insert(command.end(), argv + 1, argv + argc);
  return command;
}

// Starts `nproc` ranks of `command` on this machine (a free port on 127.0.0.1; `extra_env` added
// to each) and waits for them. Returns the exit status launcher.h describes: 0, or the first failure's.
inline int launch_ranks(const std::string& name, int nproc, std::vector<std::string> command,
                        std::vector<std::string> extra_env = {}) {
  ringgrad::launch::JobOptions job;
  job.name = name;
  job.command = std::move(command);
  job.nproc_per_node = nproc;
  job.master_port = 0;
  job.grace_ms = 3000;
  job.prefix_output = false;  // rank 0's table reads as the benchmark's own output
  job.extra_env = std::move(extra_env);
  return ringgrad::launch::run_job(job);
}

// Starts `nproc` ranks of `command` spread over `hosts` emulated hosts (tools/on_hosts.sh: network
// namespaces whose links are shaped to `link_gbit` Gbit/s, unshaped when 0), one ringrun per host,
// and waits for them; `extra_env` reaches every rank. Needs root, as namespaces do. Returns the
// job's exit status (0, or the first failure's); 77 means this machine cannot make namespaces.
inline int launch_on_hosts(const std::string& name, int hosts, int nproc, double link_gbit,
                           std::vector<std::string> command, const std::vector<std::string>& extra_env = {}) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "%s: --hosts %d makes emulated hosts (network namespaces), which needs root\n", name.c_str(),
                 hosts);
    return 2;
  }
  if (nproc % hosts != 0) {
    std::fprintf(stderr, "%s: %d ranks do not split evenly over --hosts %d\n", name.c_str(), nproc, hosts);
    return 2;
  }
  // The ranks run this very program, found through the link: /proc/self/exe would name ringrun there.
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe");
  if (!command.empty() && command[0] == "/proc/self/exe") command[0] = exe.string();
  std::vector<std::string> args = {"bash",
                                   std::string(RINGGRAD_BENCH_DIR) + "/../tools/on_hosts.sh",
                                   "--hosts",
                                   std::to_string(hosts),
                                   "--nproc-per-host",
                                   std::to_string(nproc / hosts),
                                   "--ringrun",
                                   (exe.parent_path().parent_path() / "tools" / "ringrun").string()};
  char speed[32];
  std::snprintf(speed, sizeof speed, "%g", link_gbit);
  if (link_gbit > 0) args.insert(args.end(), {"--link-gbit", speed});
  args.emplace_back("--");
  args.insert(args.end(), command.begin(), command.end());
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "%s: cannot start tools/on_hosts.sh (fork failed)\n", name.c_str());
    return 2;
  }
  if (pid == 0) {
    for (const std::string& kv : extra_env) {
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
    }
    std::vector<char*> argv_c;
    for (std::string& a : args) argv_c.push_back(a.data());
    argv_c.push_back(nullptr);
    ::execvp("bash", argv_c.data());
    std::fprintf(stderr, "%s: cannot run bash for tools/on_hosts.sh\n", name.c_str());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == 77)
    std::fprintf(stderr, "%s: --hosts: this machine cannot make emulated hosts (the reason is above)\n", name.c_str());
  return code;
}

// What a benchmark's main() asks first. Outside a job: starts `nproc` ranks of this program -- on
// this machine, or spread over `hosts` emulated hosts with `link_gbit` links (launch_on_hosts) --
// and returns their exit status. Inside one: sets `nproc` to its WORLD_SIZE (an explicit `nproc_flag`
// that disagrees is an error: returns 2) and returns nullopt -- the caller runs as a rank. Says on
// stdout which it did, once (the benchmark's own ranks stay quiet about it).
inline std::optional<int> start_ranks_unless_in_job(const std::string& name, int& nproc, int argc, char** argv,
                                                    const std::string& nproc_flag = "--nproc", int hosts = 1,
                                                    double link_gbit = 0) {
  const std::optional<JobEnvironment> job = job_from_environment();
  if (!job) {
    std::printf("%s: starting %d ranks%s\n", name.c_str(), nproc,
                hosts > 1 ? (" on " + std::to_string(hosts) + " emulated hosts").c_str() : "");
    const int status = hosts > 1 ? launch_on_hosts(name, hosts, nproc, link_gbit, this_program(argc, argv))
                                 : launch_ranks(name, nproc, this_program(argc, argv));
    if (status != 0)
      std::fprintf(stderr, "%s: the job ended with exit status %d; the reason is above\n", name.c_str(), status);
    return status;
  }
  const std::string whose = job->description();
  if (flag_given(argc, argv, nproc_flag) && nproc != job->world_size) {
    // Every rank says it: whichever exits first ends the job, perhaps before rank 0 has printed.
    std::fprintf(stderr, "%s: %s %d conflicts with %s=%d of %s; leave %s out to use the job's %d ranks\n", name.c_str(),
                 nproc_flag.c_str(), nproc, job->size_variable.c_str(), job->world_size, whose.c_str(),
                 nproc_flag.c_str(), job->world_size);
    return 2;
  }
  nproc = job->world_size;
  if (job->rank == 0 && job->launcher != name) {
    std::printf("%s: running as rank 0 of %d of %s\n", name.c_str(), job->world_size, whose.c_str());
    std::fflush(stdout);
  }
  return std::nullopt;
}

}  // namespace bench
