// tests/tools/test_ringrun.cpp: the launcher, run for real on tests/tools/probe/ringrun_probe.cpp.
//
// Each test starts ringrun with posix_spawn, collects its stdout and stderr separately, and reads
// what the probes printed: their environment, their pids (to check afterwards that none is left
// running) and their own lines. Sleeping ranks sleep far longer than a test is allowed to take,
// so a test that finishes fast shows that ringrun stopped them.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
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

namespace {

using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// This process's environment without RINGGRAD_JOB_TOKEN (each test decides whether there is one),
// plus `extra` ("NAME=value" entries).
std::vector<std::string> test_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "RINGGRAD_JOB_TOKEN=", 19) != 0) env.emplace_back(*e);
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

struct Result {
  int exit_code = -1;  // ringrun's exit status; -1 when a signal killed ringrun itself
  std::string out, err;
  double elapsed_ms = 0;
};

// One running ringrun, its stdout and stderr read through pipes.
class Ringrun {
 public:
  explicit Ringrun(std::vector<std::string> args, const std::vector<std::string>& extra_env = {}) {
    args.insert(args.begin(), RINGRUN_PATH);
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
    start_ = Clock::now();
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data());
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

  // Reads output until stdout holds `count` occurrences of `needle`; false after timeout_ms.
  bool wait_for_stdout(const std::string& needle, int count, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (occurrences(out_, needle) < count) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || !pump(static_cast<int>(left))) return occurrences(out_, needle) >= count;
    }
    return true;
  }

  void send(int signo) { kill(pid_, signo); }

  // Reads until ringrun closes both streams, then reaps it. ringrun must be done within timeout_ms.
  Result finish(int timeout_ms = 10000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (out_fd_ >= 0 || err_fd_ >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) FAIL("ringrun did not finish within " << timeout_ms << " ms; stdout so far:\n" << out_
                                                            << "stderr so far:\n" << err_);
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

  // One poll over the open streams; false when both are closed.
  bool pump(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int*, std::string*>> owners;  // the fd to close at end of file, the text to append to
    for (auto [fd, text] : {std::make_pair(&out_fd_, &out_), std::make_pair(&err_fd_, &err_)})
      if (*fd >= 0) {
        fds.push_back({*fd, POLLIN, 0});
        owners.push_back({fd, text});
      }
    if (fds.empty()) return false;
    if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return true;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      char buf[4096];
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
  std::string out_, err_;
  Clock::time_point start_;
};

Result run_ringrun(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
  return Ringrun(args, extra_env).finish();
}

// ringrun's flags, then the probe and its steps.
std::vector<std::string> with_probe(std::vector<std::string> flags, const std::vector<std::string>& steps) {
  flags.push_back(RINGRUN_PROBE_PATH);
  flags.insert(flags.end(), steps.begin(), steps.end());
  return flags;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The "env ..." line of each rank, from "[rank k] env A=1 B=2 ...", by rank.
std::map<int, Env> probe_envs(const std::string& out) {
  static const std::regex line_re(R"(^\[rank (\d+)\] env (.*)$)");
  std::map<int, Env> envs;
  for (const std::string& line : lines_of(out)) {
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) continue;
    std::istringstream words(m[2].str());
    Env env;
    for (std::string word; words >> word;) {
      const size_t eq = word.find('=');
      env[word.substr(0, eq)] = word.substr(eq + 1);
    }
    envs[std::stoi(m[1].str())] = env;
  }
  return envs;
}

// Every pid printed after " PID=" (the probes' own and their grandchildren's).
std::vector<pid_t> printed_pids(const std::string& out) {
  static const std::regex pid_re(R"( PID=(\d+))");
  std::vector<pid_t> pids;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), pid_re); it != std::sregex_iterator(); ++it)
    pids.push_back(static_cast<pid_t>(std::stol((*it)[1].str())));
  return pids;
}

// A process that no longer runs: gone, or a zombie. ringrun reaps its ranks itself, but an orphaned
// grandchild is reaped by init (or not at all, in a container whose init does not), so a zombie
// counts as stopped.
bool is_stopped(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

// SIGKILL is delivered asynchronously: a grandchild may need a moment after ringrun returns.
bool stops_soon(pid_t pid) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(1000);
  while (!is_stopped(pid)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool is_hex_token(const std::string& token) {
  return std::regex_match(token, std::regex("[0-9a-f]{32}"));
}

}  // namespace

TEST_CASE("ringrun: each rank gets RANK, WORLD_SIZE, LOCAL_RANK and the master address", "[ringrun]") {
  const int n = GENERATE(1, 2, 3);
  const Result r = run_ringrun(with_probe({"--nproc-per-node", std::to_string(n)}, {}));
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  const std::map<int, Env> envs = probe_envs(r.out);
  REQUIRE(envs.size() == static_cast<size_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    REQUIRE(envs.count(rank) == 1);
    const Env& env = envs.at(rank);
    CHECK(env.at("RANK") == std::to_string(rank));
    CHECK(env.at("WORLD_SIZE") == std::to_string(n));
    CHECK(env.at("LOCAL_RANK") == std::to_string(rank));
    CHECK(env.at("LOCAL_WORLD_SIZE") == std::to_string(n));
    CHECK(env.at("MASTER_ADDR") == "127.0.0.1");
    CHECK(env.at("MASTER_PORT") == "29500");
    CHECK(env.at("TOKEN") == envs.at(0).at("TOKEN"));  // one token per job
  }
}

TEST_CASE("ringrun: node rank 1 of 2 numbers its ranks after node 0's", "[ringrun]") {
  const Result r = run_ringrun(with_probe({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2",
                                           "--master-addr", "10.1.2.3", "--master-port", "31337"},
                                          {}),
                               {"RINGGRAD_JOB_TOKEN=shared-by-every-node"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  const std::map<int, Env> envs = probe_envs(r.out);
  REQUIRE(envs.size() == 2);
  for (int local = 0; local < 2; ++local) {
    const int rank = 2 + local;
    REQUIRE(envs.count(rank) == 1);
    const Env& env = envs.at(rank);
    CHECK(env.at("RANK") == std::to_string(rank));
    CHECK(env.at("WORLD_SIZE") == "4");
    CHECK(env.at("LOCAL_RANK") == std::to_string(local));
    CHECK(env.at("LOCAL_WORLD_SIZE") == "2");
    CHECK(env.at("MASTER_ADDR") == "10.1.2.3");
    CHECK(env.at("MASTER_PORT") == "31337");
    CHECK(env.at("TOKEN") == "shared-by-every-node");
  }
}

TEST_CASE("ringrun: a multi-node job without an inherited token runs without one and says so", "[ringrun]") {
  const Result r = run_ringrun(with_probe({"--nnodes", "2", "--node-rank", "0"}, {}));
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(probe_envs(r.out).at(0).at("TOKEN") == "<unset>");
  CHECK(r.err.find("RINGGRAD_JOB_TOKEN is not set") != std::string::npos);
}

TEST_CASE("ringrun: a job gets a fresh 32-hex-digit token unless it inherits one", "[ringrun]") {
  const std::string first = probe_envs(run_ringrun(with_probe({}, {})).out).at(0).at("TOKEN");
  const std::string second = probe_envs(run_ringrun(with_probe({}, {})).out).at(0).at("TOKEN");
  CHECK(is_hex_token(first));
  CHECK(is_hex_token(second));
  CHECK(first != second);
  const Result kept = run_ringrun(with_probe({"--nproc-per-node", "2"}, {}), {"RINGGRAD_JOB_TOKEN=0123abcd"});
  REQUIRE(kept.exit_code == 0);
  CHECK(probe_envs(kept.out).at(0).at("TOKEN") == "0123abcd");
  CHECK(probe_envs(kept.out).at(1).at("TOKEN") == "0123abcd");
}

TEST_CASE("ringrun: every output line carries its rank and stays on its stream", "[ringrun]") {
  const Result r = run_ringrun(with_probe(
      {"--nproc-per-node", "2"}, {"out", "first\nsecond", "err", "oops", "partial", "no newline at the end"}));
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  for (const std::string& line : lines_of(r.out)) CHECK(std::regex_match(line, std::regex(R"(\[rank [01]\] .*)")));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    CHECK(r.out.find(prefix + "first\n" + prefix + "second\n") != std::string::npos);
    CHECK(r.out.find(prefix + "no newline at the end\n") != std::string::npos);
    CHECK(r.err.find(prefix + "oops\n") != std::string::npos);
  }
  CHECK(r.out.find("oops") == std::string::npos);
  CHECK(r.err.find("first") == std::string::npos);
}

TEST_CASE("ringrun: a program found on PATH is started", "[ringrun]") {
  const Result r = run_ringrun({"--nproc-per-node", "2", "sh", "-c", "echo hello from $RANK"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("[rank 0] hello from 0\n") != std::string::npos);
  CHECK(r.out.find("[rank 1] hello from 1\n") != std::string::npos);
}

TEST_CASE("ringrun: a rank exiting with status 3 stops the others and is named", "[ringrun]") {
  // Rank 1 waits a little so every rank has printed its pid; the others would sleep for 20 s.
  const Result r = run_ringrun(
      with_probe({"--nproc-per-node", "3"}, {"sleep@1", "300", "exit@1", "3", "sleep", "20000"}));
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 3);
  CHECK(std::regex_search(r.err, std::regex(R"(ringrun: rank 1 \(pid \d+\) exited with status 3)")));
  CHECK(r.elapsed_ms < 5000);
  const std::vector<pid_t> pids = printed_pids(r.out);
  REQUIRE(pids.size() == 3);
  for (pid_t pid : pids) CHECK(is_stopped(pid));
}

TEST_CASE("ringrun: stopping a job also stops the processes its ranks started", "[ringrun]") {
  const Result r = run_ringrun(
      with_probe({"--nproc-per-node", "2"}, {"spawn-sleep@0", "20000", "sleep@1", "300", "exit@1", "5"}));
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 5);
  CHECK(r.elapsed_ms < 5000);
  const std::vector<pid_t> pids = printed_pids(r.out);
  REQUIRE(pids.size() == 3);  // two ranks and rank 0's child
  for (pid_t pid : pids) CHECK(stops_soon(pid));
}

TEST_CASE("ringrun: a rank killed by SIGKILL is reported with its signal", "[ringrun]") {
  const Result r = run_ringrun(
      with_probe({"--nproc-per-node", "2"}, {"sleep@0", "300", "kill@0", "9", "sleep", "20000"}));
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 128 + 9);
  CHECK(std::regex_search(r.err, std::regex(R"(ringrun: rank 0 \(pid \d+\) was killed by signal 9)")));
  CHECK(r.elapsed_ms < 5000);
  for (pid_t pid : printed_pids(r.out)) CHECK(is_stopped(pid));
}

TEST_CASE("ringrun: a rank that ignores SIGTERM is SIGKILLed after the grace period", "[ringrun]") {
  const Result r = run_ringrun(with_probe({"--nproc-per-node", "2", "--grace-ms", "400"},
                                          {"ignore-term", "sleep@1", "300", "exit@1", "1", "sleep", "20000"}));
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("rank 0 (pid") != std::string::npos);
  CHECK(r.err.find("sending SIGKILL") != std::string::npos);
  CHECK(r.elapsed_ms >= 300 + 400);  // rank 1's sleep, then the full grace period
  CHECK(r.elapsed_ms < 5000);
  for (pid_t pid : printed_pids(r.out)) CHECK(is_stopped(pid));
}

TEST_CASE("ringrun: SIGTERM to ringrun reaches every rank and none survives", "[ringrun]") {
  Ringrun job(with_probe({"--nproc-per-node", "2"}, {"sleep", "20000"}));
  REQUIRE(job.wait_for_stdout(" PID=", 2, 5000));
  job.send(SIGTERM);
  const Result r = job.finish();
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 128 + SIGTERM);
  CHECK(r.elapsed_ms < 5000);
  CHECK(r.err.find("got SIGTERM") != std::string::npos);
  const std::vector<pid_t> pids = printed_pids(r.out);
  REQUIRE(pids.size() == 2);
  for (pid_t pid : pids) CHECK(is_stopped(pid));
}

TEST_CASE("ringrun: master port 0 picks a port that can be bound", "[ringrun]") {
  const Result r = run_ringrun(with_probe({"--nproc-per-node", "2", "--master-port", "0"}, {}));
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  const std::map<int, Env> envs = probe_envs(r.out);
  REQUIRE(envs.size() == 2);
  CHECK(envs.at(0).at("MASTER_PORT") == envs.at(1).at("MASTER_PORT"));
  const int port = std::stoi(envs.at(0).at("MASTER_PORT"));
  REQUIRE(port > 0);
  REQUIRE(port < 65536);
  // What rank 0's store will do with it: bind and listen on MASTER_ADDR.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  CHECK(listen(fd, 1) == 0);
  close(fd);
}

TEST_CASE("ringrun: bad usage is reported with what was expected and a usage line", "[ringrun]") {
  const std::string probe = RINGRUN_PROBE_PATH;
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{}, "expected a program to run"},
      {{"--nproc-per-node", "2"}, "expected a program to run"},
      {{"--nproc-per-node", "0", probe}, "--nproc-per-node expects an integer in [1, 4096], got '0'"},
      {{"--nproc-per-node", "two", probe}, "--nproc-per-node expects an integer"},
      {{"--nproc-per-node"}, "--nproc-per-node expects a value, got none"},
      {{"--nnodes", "2", "--node-rank", "2", probe}, "--node-rank expects a value in [0, 1] for --nnodes 2, got 2"},
      {{"--nnodes", "2", "--master-port", "0", probe}, "--master-port 0"},
      {{"--master-port", "70000", probe}, "--master-port expects an integer in [0, 65535]"},
      {{"--bogus", probe}, "unknown flag '--bogus'"},
  };
  for (const Case& c : cases) {
    const Result r = run_ringrun(c.args);
    INFO("expected: " << c.expected << "\nstderr:\n" << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("ringrun: " + c.expected) != std::string::npos);
    CHECK(r.err.find("usage: ringrun") != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("ringrun: --help prints the usage and exits 0", "[ringrun]") {
  const Result r = run_ringrun({"--help"});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("usage: ringrun") != std::string::npos);
  CHECK(r.out.find("--grace-ms") != std::string::npos);
}

TEST_CASE("ringrun: a program that cannot be started exits 127 naming it", "[ringrun]") {
  const Result r = run_ringrun({"--nproc-per-node", "2", "/nonexistent/ringrun-test-program"});
  INFO("stderr:\n" << r.err);
  CHECK(r.exit_code == 127);
  CHECK(r.err.find("cannot start rank 0: '/nonexistent/ringrun-test-program'") != std::string::npos);
}
