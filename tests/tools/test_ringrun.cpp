// tests/tools/test_ringrun.cpp: the launcher, run for real on tests/tools/probe/ringrun_probe.cpp
// (launch_harness.h says how).
#include "launch_harness.h"

using namespace launch_test;

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
    CHECK(env.at("LAUNCHER") == "ringrun");
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
  const Result r = run_ringrun(with_probe({"--nproc-per-node", "2"},
                                          {"out", "first\nsecond", "err", "oops", "partial", "no newline at the end"}));
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
  const Result r =
      run_ringrun(with_probe({"--nproc-per-node", "3"}, {"sleep@1", "300", "exit@1", "3", "sleep", "20000"}));
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 3);
  CHECK(std::regex_search(r.err, std::regex(R"(ringrun: rank 1 \(pid \d+\) exited with status 3)")));
  CHECK(r.elapsed_ms < 5000);
  const std::vector<pid_t> pids = printed_pids(r.out);
  REQUIRE(pids.size() == 3);
  for (pid_t pid : pids) CHECK(is_stopped(pid));
}

TEST_CASE("ringrun: stopping a job also stops the processes its ranks started", "[ringrun]") {
  const Result r =
      run_ringrun(with_probe({"--nproc-per-node", "2"}, {"spawn-sleep@0", "20000", "sleep@1", "300", "exit@1", "5"}));
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 5);
  CHECK(r.elapsed_ms < 5000);
  const std::vector<pid_t> pids = printed_pids(r.out);
  REQUIRE(pids.size() == 3);  // two ranks and rank 0's child
  for (pid_t pid : pids) CHECK(stops_soon(pid));
}

TEST_CASE("ringrun: a rank killed by SIGKILL is reported with its signal", "[ringrun]") {
  const Result r =
      run_ringrun(with_probe({"--nproc-per-node", "2"}, {"sleep@0", "300", "kill@0", "9", "sleep", "20000"}));
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

TEST_CASE("ringrun: SIGKILL to ringrun takes its ranks with it, as a host going down does", "[ringrun]") {
  // SIGKILL cannot be caught: the ranks go because each was set to die with its launcher.
  Ringrun job(with_probe({"--nproc-per-node", "3"}, {"sleep", "20000"}));
  REQUIRE(job.wait_for_stdout(" PID=", 3, 5000));
  job.send(SIGKILL);
  const Result r = job.finish();
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == -1);  // killed, not exited
  const std::vector<pid_t> pids = printed_pids(r.out);
  REQUIRE(pids.size() == 3);
  for (pid_t pid : pids) CHECK(stops_soon(pid));
}

TEST_CASE("ringrun: SIGQUIT, SIGALRM and SIGXCPU stop the job like SIGTERM", "[ringrun]") {
  const int signo = GENERATE(SIGQUIT, SIGALRM, SIGXCPU);
  Ringrun job(with_probe({"--nproc-per-node", "2"}, {"sleep", "20000"}));
  REQUIRE(job.wait_for_stdout(" PID=", 2, 5000));
  job.send(signo);
  const Result r = job.finish();
  INFO("signal " << signo << "\nstdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 128 + signo);  // before, ringrun died of it and left the ranks running
  CHECK(r.elapsed_ms < 5000);
  const std::string said = signo == SIGQUIT   ? "got SIGQUIT; forwarding it to every rank"
                           : signo == SIGALRM ? "got SIGALRM; stopping every rank with SIGTERM"
                                              : "got SIGXCPU; stopping every rank with SIGTERM";
  CHECK(r.err.find(said) != std::string::npos);
  const std::vector<pid_t> pids = printed_pids(r.out);
  REQUIRE(pids.size() == 2);
  for (pid_t pid : pids) CHECK(stops_soon(pid));
}

TEST_CASE("ringrun: SIGUSR1 to ringrun reaches every rank and the job goes on", "[ringrun]") {
  Ringrun job(with_probe({"--nproc-per-node", "2"}, {"catch-usr1", "out", "ready", "sleep", "600", "exit@1", "4"}));
  REQUIRE(job.wait_for_stdout("] ready\n", 2, 5000));
  job.send(SIGUSR1);
  REQUIRE(job.wait_for_stdout("] caught SIGUSR1\n", 2, 5000));
  const Result r = job.finish();
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 4);  // the ranks ran to their own end: rank 1 exits 4 after its sleep
  CHECK(r.err.find("got SIGUSR1; forwarding it to every rank, the job goes on") != std::string::npos);
  CHECK(r.out.find("[rank 0] caught SIGUSR1\n") != std::string::npos);
  CHECK(r.out.find("[rank 1] caught SIGUSR1\n") != std::string::npos);
}

TEST_CASE("ringrun: a signal it inherited as ignored stays ignored, in the ranks too (nohup)", "[ringrun]") {
  // `nohup ringrun ... &`: logging out sends SIGHUP, which must neither stop the job nor reach a rank.
  Ringrun job(with_probe({"--nproc-per-node", "2"}, {"signals", "sleep", "600"}), {}, RINGRUN_PATH,
              SpawnSignals{{SIGHUP}, {}});
  REQUIRE(job.wait_for_stdout("] signals ", 2, 5000));
  job.send(SIGHUP);
  // A rank's own SIGHUP (from a closed terminal, say) must find it ignored as well.
  for (pid_t pid : printed_pids(job.stdout_so_far())) kill(pid, SIGHUP);
  const Result r = job.finish();
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("SIGHUP") == std::string::npos);
  const std::vector<SignalReport> reports = signal_reports(r.out);
  REQUIRE(reports.size() == 2);
  for (const SignalReport& report : reports) {
    INFO(report.lead);
    CHECK(report.ignores(SIGHUP));
    CHECK_FALSE(report.ignores(SIGPIPE));  // ignored by ringrun itself, the default again in a rank
  }
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
      {{"--nproc-per-node"}, "--nproc-per-node needs a value"},
      {{"--nnodes", "2", "--node-rank", "2", probe}, "--node-rank expects a value in [0, 1] for --nnodes 2, got 2"},
      {{"--nnodes", "2", "--master-port", "0", probe}, "--master-port 0"},
      {{"--master-port", "70000", probe}, "--master-port expects an integer in [0, 65535]"},
      {{"--bogus", probe}, "unknown flag --bogus"},
      {{"--timeout", "0", probe}, "--timeout expects a number of seconds in (0, 2592000], got '0'"},
      {{"--timeout", "2592001", probe}, "--timeout expects a number of seconds in (0, 2592000], got '2592001'"},
      {{"--nnodes", "1048576", "--nproc-per-node", "4096", probe},
       "--nnodes 1048576 times --nproc-per-node 4096 expects at most 1048576 ranks in the job (WORLD_SIZE), got "
       "4294967296"},
      {{"--nnodes", "1024", "--nproc-per-node", "1025", probe}, "--nnodes 1024 times --nproc-per-node 1025"},
      {{"--timeout", "soon", probe}, "--timeout expects a finite number, got 'soon'"},
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
  CHECK(r.out.find("--timeout SECONDS") != std::string::npos);
  CHECK(r.out.find("default: the library's, 60 s for setup") != std::string::npos);
}

TEST_CASE("ringrun: --timeout exports RINGGRAD_TIMEOUT to every rank", "[ringrun]") {
  const Result r =
      run_ringrun({"--nproc-per-node", "2", "--timeout", "2.5", "sh", "-c", "echo timeout=$RINGGRAD_TIMEOUT"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("[rank 0] timeout=2.5\n") != std::string::npos);
  CHECK(r.out.find("[rank 1] timeout=2.5\n") != std::string::npos);
  const Result longest = run_ringrun({"--timeout", "2592000", "sh", "-c", "echo timeout=$RINGGRAD_TIMEOUT"});
  CHECK(longest.exit_code == 0);  // the library's own upper bound, 30 days
  std::smatch m;
  REQUIRE(std::regex_search(longest.out, m, std::regex(R"(\[rank 0\] timeout=(\S+)\n)")));
  CHECK(std::stod(m[1].str()) == 2592000.0);         // written "2.592e+06": the shortest text that reads back
  if (std::getenv("RINGGRAD_TIMEOUT") == nullptr) {  // without the flag, the ranks keep the library's
    const Result plain = run_ringrun({"sh", "-c", "echo timeout=${RINGGRAD_TIMEOUT-unset}"});
    CHECK(plain.out.find("[rank 0] timeout=unset\n") != std::string::npos);
  }
}

TEST_CASE("ringrun: a stopped rank is stopped with the job at once, not after the grace period", "[ringrun]") {
  // Rank 1 stops itself (SIGSTOP): it cannot act on SIGTERM until it is continued, which ringrun does.
  const Result r = run_ringrun(
      with_probe({"--nproc-per-node", "2", "--grace-ms", "20000"}, {"kill@1", "19", "sleep@0", "300", "exit@0", "3"}));
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.exit_code == 3);
  CHECK(std::regex_search(r.err, std::regex(R"(ringrun: rank 0 \(pid \d+\) exited with status 3)")));
  CHECK(r.elapsed_ms < 5000);
  const std::vector<pid_t> pids = printed_pids(r.out);
  REQUIRE(pids.size() == 2);
  for (pid_t pid : pids) CHECK(stops_soon(pid));
}

TEST_CASE("ringrun: a program that cannot be started exits 127 naming it", "[ringrun]") {
  const Result r = run_ringrun({"--nproc-per-node", "2", "/nonexistent/ringrun-test-program"});
  INFO("stderr:\n" << r.err);
  CHECK(r.exit_code == 127);
  CHECK(r.err.find("cannot start rank 0: '/nonexistent/ringrun-test-program'") != std::string::npos);
}

// The ranks print 10 MB each that nobody reads (the harness holds ringrun's stdout unread, as a
// paused `ringrun ... | less` does): ringrun must still take it all from them, so that they never
// block on their writes, and still act at once on a signal or a failed rank.
std::vector<std::string> flood_then(const std::vector<std::string>& steps) {
  std::vector<std::string> all = {"err-pid", "flood", "10000000"};
  all.insert(all.end(), steps.begin(), steps.end());
  return all;
}

TEST_CASE("ringrun: a reader that stops reading holds up neither the ranks nor SIGTERM", "[ringrun]") {
  Ringrun job(with_probe({"--nproc-per-node", "2"}, flood_then({"err", "flooded", "sleep", "20000"})));
  job.hold_stdout(true);
  CHECK(job.wait_for_stderr("] flooded\n", 2, 15000));  // their writes did not block
  const Clock::time_point sent = Clock::now();
  job.send(SIGTERM);
  CHECK(job.wait_for_stderr("got SIGTERM; forwarding it to every rank", 1, 2000));
  const std::vector<pid_t> pids = printed_pids(job.stderr_so_far());
  CHECK(pids.size() == 2);
  for (pid_t pid : pids) CHECK(stops_soon(pid));  // while ringrun still offers the reader its output
  const Result r = job.finish(15000);
  INFO("stderr:\n" << r.err);
  CHECK(r.exit_code == 128 + SIGTERM);
  // Then it gives the reader 2 s to take something, in vain, and gives up.
  CHECK(ms_since(sent) < 6000);
}

TEST_CASE("ringrun: a rank that fails while nobody reads stdout stops the job at once", "[ringrun]") {
  Ringrun job(with_probe({"--nproc-per-node", "2"}, flood_then({"exit@1", "3", "sleep", "20000"})));
  job.hold_stdout(true);
  CHECK(job.wait_for_stderr("exited with status 3; stopping the other ranks", 1, 15000));
  const Result r = job.finish(15000);
  INFO("stderr:\n" << r.err);
  CHECK(r.exit_code == 3);
  CHECK(std::regex_search(r.err, std::regex(R"(ringrun: rank 1 \(pid \d+\) exited with status 3)")));
  const std::vector<pid_t> pids = printed_pids(r.err);
  REQUIRE(pids.size() == 2);
  for (pid_t pid : pids) CHECK(is_stopped(pid));  // rank 0 would sleep for 20 s
  CHECK(r.elapsed_ms < 15000);
}

TEST_CASE("ringrun: output the reader did not take in time is dropped in whole lines, and counted", "[ringrun]") {
  Ringrun job(with_probe({"--nproc-per-node", "2"}, flood_then({"err", "flooded", "sleep", "1000", "out", "done"})));
  job.hold_stdout(true);
  REQUIRE(job.wait_for_stderr("] flooded\n", 2, 15000));
  job.hold_stdout(false);  // the reader comes back, and takes everything from now on
  const Result r = job.finish(20000);
  INFO("stderr:\n" << r.err);
  CHECK(r.exit_code == 0);
  // Some 40,000 lines: parsed by hand, as std::regex would take seconds in an unoptimised build.
  static const std::regex notice(
      R"(ringrun: dropped (\d+) lines \((\d+) bytes\) of output the reader did not take in time \((.*)\))");
  static const std::regex per_rank(R"(rank ([01]): (\d+) lines)");
  const auto is_flood_line = [](const std::string& body) {  // "flood 0000042 xxx...", 99 bytes
    return body.size() == 99 && body.compare(0, 6, "flood ") == 0 && body.find_first_not_of("0123456789", 6) == 13 &&
           body.find_first_not_of('x', 14) == std::string::npos;
  };
  long seen[2] = {0, 0}, dropped[2] = {0, 0}, last[2] = {-1, -1};
  int notices = 0, done = 0, torn = 0, out_of_order = 0;
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    const bool from_rank = line.size() >= 9 && line.compare(0, 6, "[rank ") == 0 &&
                           (line[6] == '0' || line[6] == '1') && line.compare(7, 2, "] ") == 0;
    const std::string body = from_rank ? line.substr(9) : std::string();
    if (from_rank && (is_flood_line(body) || body == "done" || body.compare(0, 4, "env ") == 0)) {
      const int rank = line[6] - '0';
      ++seen[rank];
      if (body == "done") ++done;
      if (body.compare(0, 6, "flood ") == 0) {
        const long n = std::stol(body.substr(6, 7));
        if (n <= last[rank]) ++out_of_order;
        last[rank] = n;
      }
    } else if (std::regex_match(line, m, notice)) {
      ++notices;
      const std::string ranks = m[3].str();
      for (auto it = std::sregex_iterator(ranks.begin(), ranks.end(), per_rank); it != std::sregex_iterator(); ++it)
        dropped[std::stoi((*it)[1].str())] += std::stol((*it)[2].str());
    } else {
      ++torn;
      if (torn <= 3) UNSCOPED_INFO("not a whole line: " << line.substr(0, 200));
    }
  }
  CHECK(torn == 0);
  CHECK(out_of_order == 0);  // each rank's lines in the order it wrote them
  CHECK(notices >= 1);
  CHECK(done == 2);  // the newest lines come through
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank << ": " << seen[rank] << " lines seen, " << dropped[rank] << " dropped");
    CHECK(seen[rank] + dropped[rank] == 1 + 10000000 / 100 + 1);  // "env ...", the flood, "done"
  }
}
