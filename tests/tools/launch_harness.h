// tests/tools/launch_harness.h: runs a launcher (ringrun, or a program using bench/bench_launch.h)
// for real and reads what its ranks -- tests/tools/probe/ringrun_probe.cpp -- printed.
//
// A test starts the launcher with posix_spawn, collects its stdout and stderr separately, and reads
// what the probes printed: their environment, their pids (to check afterwards that none is left
// running) and their own lines. Sleeping ranks sleep far longer than a test is allowed to take,
// so a test that finishes fast shows that the launcher stopped them.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

extern char** environ;

namespace launch_test {

using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// This process's environment without RINGGRAD_JOB_TOKEN (each test decides whether there is one)
// and without the variables by which a launcher tells a process it is a rank (the tests may run
// under srun or mpirun themselves), plus `extra` ("NAME=value" entries).
inline std::vector<std::string> test_environment(const std::vector<std::string>& extra) {
  static const char* const kDropped[] = {
      "RINGGRAD_JOB_TOKEN",   "RINGGRAD_LAUNCHER",    "RANK",     "WORLD_SIZE", "TORCHELASTIC_RUN_ID",
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",   "SLURM_PROCID",
      "SLURM_NTASKS"};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool dropped = false;
    for (const char* name : kDropped) dropped = dropped || entry.rfind(std::string(name) + "=", 0) == 0;
    if (!dropped) env.push_back(entry);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// How the launcher starts, signal-wise: what the shell that started it could have left it.
struct SpawnSignals {
  std::vector<int> ignored;  // SIG_IGN from the start, as `nohup` (SIGHUP) or `prog &` (SIGINT) leave them
  std::vector<int> blocked;  // in its signal mask
};

struct Result {
  int exit_code = -1;  // ringrun's exit status; -1 when a signal killed ringrun itself
  std::string out, err;
  double elapsed_ms = 0;
};

// One running launcher -- ringrun unless `program` says otherwise -- its stdout and stderr read
// through pipes.
class Ringrun {
 public:
  explicit Ringrun(std::vector<std::string> args, const std::vector<std::string>& extra_env = {},
                   const std::string& program = RINGRUN_PATH, const SpawnSignals& signals = {}) {
    args.insert(args.begin(), program);
    std::vector<std::string> env = test_environment(extra_env);
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    int out_pipe[2], err_pipe[2];
    REQUIRE(pipe(out_pipe) == 0);
    REQUIRE(pipe(err_pipe) == 0);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) fcntl(fd, F_SETFD, FD_CLOEXEC);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t mask;
    sigemptyset(&mask);
    for (int signo : signals.blocked) sigaddset(&mask, signo);
    posix_spawnattr_setsigmask(&attr, &mask);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    // posix_spawn has no "ignore" attribute, but an ignored signal stays ignored across exec: ignore
    // it here for the moment of the spawn (nothing in a test sends this process those signals).
    std::vector<struct sigaction> saved(signals.ignored.size());
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    for (size_t i = 0; i < signals.ignored.size(); ++i) sigaction(signals.ignored[i], &ignore, &saved[i]);
    start_ = Clock::now();
    const int rc = posix_spawn(&pid_, argv[0], &actions, &attr, argv.data(), envp.data());
    for (size_t i = 0; i < signals.ignored.size(); ++i) sigaction(signals.ignored[i], &saved[i], nullptr);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
    close(out_pipe[1]);
    close(err_pipe[1]);
    out_fd_ = out_pipe[0];
    err_fd_ = err_pipe[0];
    REQUIRE(rc == 0);
  }
  ~Ringrun() {
    if (pid_ > 0) {  // a test failed midway: do not leave ringrun running
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }
  Ringrun(const Ringrun&) = delete;
  Ringrun& operator=(const Ringrun&) = delete;

  // Reads output until stdout (stderr) holds `count` occurrences of `needle`; false after timeout_ms.
  bool wait_for_stdout(const std::string& needle, int count, int timeout_ms) {
    return wait_for(out_, needle, count, timeout_ms);
  }
  bool wait_for_stderr(const std::string& needle, int count, int timeout_ms) {
    return wait_for(err_, needle, count, timeout_ms);
  }

  // While held, nothing reads ringrun's stdout: its pipe fills and stays full, as with a reader
  // that has stopped reading (`ringrun ... | less`, paused). finish() then reads stderr alone.
  void hold_stdout(bool held) { stdout_held_ = held; }

  void send(int signo) { kill(pid_, signo); }
  const std::string& stdout_so_far() const { return out_; }
  const std::string& stderr_so_far() const { return err_; }

  // Reads until ringrun closes both streams (stderr alone while stdout is held), then reaps it.
  // ringrun must be done within timeout_ms.
  Result finish(int timeout_ms = 10000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while ((out_fd_ >= 0 && !stdout_held_) || err_fd_ >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0)
        FAIL("ringrun did not finish within " << timeout_ms << " ms; stdout so far:\n"
                                              << out_ << "stderr so far:\n"
                                              << err_);
      pump(static_cast<int>(left));
    }
    int status = 0;
    REQUIRE(waitpid(pid_, &status, 0) == pid_);
    pid_ = -1;
    Result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = out_;
    r.err = err_;
    r.elapsed_ms = ms_since(start_);
    return r;
  }

 private:
  static int occurrences(const std::string& text, const std::string& needle) {
    int n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
  }

  bool wait_for(const std::string& text, const std::string& needle, int count, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (occurrences(text, needle) < count) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || !pump(static_cast<int>(left))) return occurrences(text, needle) >= count;
    }
    return true;
  }

  // One poll over the open streams that are read; false when there is none.
  bool pump(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int*, std::string*>> owners;  // the fd to close at end of file, the text to append to
    for (auto [fd, text] : {std::make_pair(&out_fd_, &out_), std::make_pair(&err_fd_, &err_)})
      if (*fd >= 0 && !(fd == &out_fd_ && stdout_held_)) {
        fds.push_back({*fd, POLLIN, 0});
        owners.push_back({fd, text});
      }
    if (fds.empty()) return false;
    if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return true;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      char buf[65536];
      const ssize_t n = read(*owners[i].first, buf, sizeof buf);
      if (n > 0) {
        owners[i].second->append(buf, static_cast<size_t>(n));
      } else if (!(n < 0 && errno == EINTR)) {
        close(*owners[i].first);
        *owners[i].first = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  bool stdout_held_ = false;
  std::string out_, err_;
  Clock::time_point start_;
};

inline Result run_ringrun(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
  return Ringrun(args, extra_env).finish();
}

// ringrun's flags, then the probe and its steps.
inline std::vector<std::string> with_probe(std::vector<std::string> flags, const std::vector<std::string>& steps) {
  flags.push_back(RINGRUN_PROBE_PATH);
  flags.insert(flags.end(), steps.begin(), steps.end());
  return flags;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The "env ..." line of each rank, from "[rank k] env A=1 B=2 ...", by rank. With `prefixed`
// false, from "env A=1 ..." lines (a launcher that does not prefix), by their RANK.
inline std::map<int, Env> probe_envs(const std::string& out, bool prefixed = true) {
  static const std::regex prefixed_re(R"(^\[rank (\d+)\] env (.*)$)"), plain_re(R"(^()env (.*)$)");
  std::map<int, Env> envs;
  for (const std::string& line : lines_of(out)) {
    std::smatch m;
    if (!std::regex_match(line, m, prefixed ? prefixed_re : plain_re)) continue;
    std::istringstream words(m[2].str());
    Env env;
    for (std::string word; words >> word;) {
      const size_t eq = word.find('=');
      env[word.substr(0, eq)] = word.substr(eq + 1);
    }
    envs[prefixed ? std::stoi(m[1].str()) : std::stoi(env["RANK"])] = env;
  }
  return envs;
}

// Every pid printed after " PID=" (the probes' own and their grandchildren's).
inline std::vector<pid_t> printed_pids(const std::string& out) {
  static const std::regex pid_re(R"( PID=(\d+))");
  std::vector<pid_t> pids;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), pid_re); it != std::sregex_iterator(); ++it)
    pids.push_back(static_cast<pid_t>(std::stol((*it)[1].str())));
  return pids;
}

// A process that no longer runs: gone, or a zombie. ringrun reaps its ranks itself, but an orphaned
// grandchild is reaped by init (or not at all, in a container whose init does not), so a zombie
// counts as stopped.
inline bool is_stopped(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

// SIGKILL is delivered asynchronously: a grandchild may need a moment after ringrun returns.
inline bool stops_soon(pid_t pid) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(1000);
  while (!is_stopped(pid)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Each "signals ignored=... blocked=..." line (probe/signal_report.h) in `out`, in the order printed,
// with what precedes it on its line ("[rank 1] ", or "" for an unprefixed rank).
struct SignalReport {
  std::string lead;
  std::vector<int> ignored, blocked;
  bool ignores(int signo) const { return std::find(ignored.begin(), ignored.end(), signo) != ignored.end(); }
  bool blocks(int signo) const { return std::find(blocked.begin(), blocked.end(), signo) != blocked.end(); }
};

inline std::vector<SignalReport> signal_reports(const std::string& out) {
  static const std::regex line_re(R"(^(.*)signals ignored=([0-9,]*) blocked=([0-9,]*)$)");
  const auto numbers = [](const std::string& list) {
    std::vector<int> v;
    std::istringstream in(list);
    for (std::string n; std::getline(in, n, ',');) v.push_back(std::stoi(n));
    return v;
  };
  std::vector<SignalReport> reports;
  for (const std::string& line : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(line, m, line_re)) reports.push_back({m[1].str(), numbers(m[2].str()), numbers(m[3].str())});
  }
  return reports;
}

inline bool is_hex_token(const std::string& token) { return std::regex_match(token, std::regex("[0-9a-f]{32}")); }

}  // namespace launch_test
