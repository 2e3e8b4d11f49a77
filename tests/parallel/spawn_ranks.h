// tests/parallel/spawn_ranks.h: start N processes as the ranks of one job and collect how they ended.
//
// Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, plus any
// extra variables; its stdout and stderr go to one file per rank. If the job has not finished by
// `limit`, every rank still running is killed, so a hang in the code under test fails the test
// instead of stalling the suite.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "test_util.h"

extern char** environ;

namespace ringgrad::test {

struct RankResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr together
};

struct JobResult {
  std::vector<RankResult> ranks;
  bool timed_out = false;
  double seconds = 0;
};

// A port nobody listens on right now (the kernel's pick for port 0).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t length = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// True when a listener could bind 127.0.0.1:port now.
inline bool port_is_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as ringgrad's Listener binds
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return free;
}

// A port P with P + 1 free too, for a job whose store takes the port after its launcher's (torchrun).
// Below the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), where free_port()'s
// ports are: there any test's outgoing connection can take P + 1 between the check and its use,
// here only a listener bound on purpose can.
inline int free_port_pair() {
  int ephemeral_low = 32768, ephemeral_high = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low >> ephemeral_high;
  const int low = 20000, high = std::max(low + 2, std::min(ephemeral_low, 32768) - 2);
  uint64_t state = static_cast<uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^
                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int attempt = 0; attempt < 200; ++attempt) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int port = low + static_cast<int>((state >> 33) % static_cast<uint64_t>(high - low));
    if (port_is_free(port) && port_is_free(port + 1)) return port;
  }
  return free_port();  // a crowded machine: the old way
}

inline JobResult spawn_ranks(int world, const std::string& program, const std::vector<std::string>& args,
                             const std::vector<std::pair<std::string, std::string>>& extra_env = {},
                             std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  const TempDir dir;
  const int port = free_port();
  std::vector<pid_t> pids(world, -1);
  for (int rank = 0; rank < world; ++rank) {
    // The job's variables, then the extra ones (which may replace them, MASTER_PORT say), then what
    // this process inherited -- each name once, since getenv returns the first match.
    std::vector<std::pair<std::string, std::string>> vars = {{"RANK", std::to_string(rank)},
                                                             {"LOCAL_RANK", std::to_string(rank)},
                                                             {"WORLD_SIZE", std::to_string(world)},
                                                             {"MASTER_ADDR", "127.0.0.1"},
                                                             {"MASTER_PORT", std::to_string(port)}};
    for (const auto& [name, value] : extra_env) {
      bool replaced = false;
      for (auto& var : vars)
        if (var.first == name) var.second = value, replaced = true;
      if (!replaced) vars.emplace_back(name, value);
    }
    std::vector<std::string> env;
    for (const auto& [name, value] : vars) env.push_back(name + "=" + value);
    for (char** e = environ; *e; ++e) {
      const std::string entry = *e;
      const std::string name = entry.substr(0, entry.find('='));
      bool ours = false;
      for (const auto& var : vars) ours = ours || var.first == name;
      if (!ours) env.push_back(entry);
    }
    std::vector<char*> envp, argv;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> arg_strings = {program};
    arg_strings.insert(arg_strings.end(), args.begin(), args.end());
    for (std::string& s : arg_strings) argv.push_back(s.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = dir.file("rank" + std::to_string(rank) + ".log");
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawn(&pids[rank], program.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) pids[rank] = -1;
  }

  JobResult job;
  job.ranks.resize(world);
  const auto start = std::chrono::steady_clock::now();
  int running = 0;
  for (pid_t pid : pids) running += pid > 0;
  while (running > 0) {
    for (int rank = 0; rank < world; ++rank) {
      if (pids[rank] <= 0) continue;
      int status = 0;
      if (::waitpid(pids[rank], &status, WNOHANG) != pids[rank]) continue;
      job.ranks[rank].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      job.ranks[rank].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      pids[rank] = -1;
      --running;
    }
    if (running > 0 && std::chrono::steady_clock::now() - start > limit) {
      job.timed_out = true;
      for (pid_t pid : pids)
        if (pid > 0) ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int rank = 0; rank < world; ++rank) {
    std::ifstream in(dir.file("rank" + std::to_string(rank) + ".log"));
    std::stringstream text;
    text << in.rdbuf();
    job.ranks[rank].output = text.str();
  }
  return job;
}

// True when the job finished in time and every rank exited 0 -- and, with `say_ok`, also printed
// "rank k: ok" (the workers' last line when all their checks passed).
inline bool all_succeeded(const JobResult& job, bool say_ok = false) {
  for (const auto& r : job.ranks)
    if (r.exit_code != 0 || (say_ok && r.output.find(": ok") == std::string::npos)) return false;
  return !job.timed_out;
}

// Every rank's output, labelled, for a failure message.
inline std::string all_output(const JobResult& job) {
  std::string text;
  for (size_t r = 0; r < job.ranks.size(); ++r)
    text += "--- rank " + std::to_string(r) + " (exit " + std::to_string(job.ranks[r].exit_code) + ", signal " +
            std::to_string(job.ranks[r].signal) + ")\n" + job.ranks[r].output;
  return text;
}

}  // namespace ringgrad::test
