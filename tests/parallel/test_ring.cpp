// tests/parallel/test_ring.cpp: the ring backend across real processes.
//
// Each test starts `ringgrad_dist_worker` as the ranks of a job (spawn_ranks.h) on this machine:
// every collective x dtype x awkward length x world size 1..4 against directly computed answers,
// over shared memory and over TCP; bitwise-identical results on every rank and every run; and the
// failures that must not hang -- a rank killed in the middle of an all-reduce, ranks that disagree
// on sizes -- plus a slow rank that must not fail.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "parallel/ring/ring_order.h"
#include "parallel/socket.h"
#include "spawn_ranks.h"

using ringgrad::test::all_output;
using ringgrad::test::all_succeeded;
using ringgrad::test::JobResult;
using ringgrad::test::spawn_ranks;
using ringgrad::test::TempDir;

// The number after "error after " in a worker's output: how long it took that rank to fail.
long long error_after_ms(const std::string& output) {
  const size_t at = output.find("error after ");
  return at == std::string::npos ? -1 : std::stoll(output.substr(at + 12));
}

// A job started through another launcher's command line, bounded by timeout(1) so that a hang fails
// the test instead of stalling the suite; its output (stdout and stderr) is kept.
struct LauncherRun {
  explicit LauncherRun(const std::string& launcher_command) {
    const TempDir dir;
    const std::string log = dir.file("launcher.log");
    command = "timeout -s KILL 90 " + launcher_command;
    status = std::system((command + " > " + log + " 2>&1").c_str());
    output = ringgrad::test::read_file(log);
  }
  std::string command, output;
  int status = -1;
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

namespace {

const std::string kWorker = RINGGRAD_DIST_WORKER_PATH;

}  // namespace

TEST_CASE("ring: every collective, dtype and length is exact for 1 to 4 ranks over shared memory", "[ring]") {
  const int world = GENERATE(1, 2, 3, 4);
  const JobResult job = spawn_ranks(world, kWorker, {"collectives", "shm"});
  INFO(all_output(job));
  CHECK(all_succeeded(job));
  if (world > 1)
    for (const auto& r : job.ranks) CHECK(r.output.find("transport shm") != std::string::npos);
}

TEST_CASE("ring: every collective, dtype and length is exact for 2 and 3 ranks over TCP", "[ring]") {
  const int world = GENERATE(2, 3);
  const JobResult job = spawn_ranks(world, kWorker, {"collectives", "tcp"});
  INFO(all_output(job));
  CHECK(all_succeeded(job));
  for (const auto& r : job.ranks) CHECK(r.output.find("transport tcp") != std::string::npos);
}

TEST_CASE("ring: auto picks shared memory when all ranks share this host", "[ring]") {
  const JobResult job = spawn_ranks(2, kWorker, {"slow", "auto"}, {{"VICTIM", "-1"}});
  INFO(all_output(job));
  CHECK(all_succeeded(job));
  for (const auto& r : job.ranks) CHECK(r.output.find("transport shm") != std::string::npos);
}

TEST_CASE("ring: all-reduce results are bitwise identical on every rank and every run", "[ring]") {
  const std::string transport = GENERATE(std::string("shm"), std::string("tcp"));
  std::set<std::string> hashes;
  for (int run = 0; run < 2; ++run) {
    const JobResult job = spawn_ranks(3, kWorker, {"determinism", transport});
    INFO(all_output(job));
    REQUIRE(all_succeeded(job));
    for (const auto& r : job.ranks) {
      const size_t at = r.output.find("hash ");
      REQUIRE(at != std::string::npos);
      hashes.insert(r.output.substr(at, 21));
    }
  }
  CHECK(hashes.size() == 1);
}

TEST_CASE("ring: a rank killed mid all-reduce makes the others fail fast and name it", "[ring]") {
  const std::string transport = GENERATE(std::string("shm"), std::string("tcp"));
  const int world = GENERATE(2, 4);
  // A 60 s timeout: the survivors must notice the death itself, long before the deadline.
  const JobResult job = spawn_ranks(world, kWorker, {"die", transport}, {{"VICTIM", "1"}, {"TIMEOUT_MS", "60000"}},
                                    std::chrono::seconds(30));
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  CHECK(job.seconds < 10);
  CHECK(job.ranks[1].signal == 9);
  for (int r = 0; r < world; ++r) {
    if (r == 1) continue;
    CHECK(job.ranks[r].exit_code == 3);
    CHECK(job.ranks[r].output.find("rank 1") != std::string::npos);
  }
}

// The numbers after `label` in a worker's line, up to its end or a ';'.
std::vector<double> numbers_after(const std::string& output, const std::string& label) {
  std::vector<double> numbers;
  const size_t at = output.find(label);
  if (at == std::string::npos) return numbers;
  std::istringstream line(output.substr(at + label.size(), output.find_first_of(";\n", at) - at - label.size()));
  for (double x; line >> x;) numbers.push_back(x);
  return numbers;
}

TEST_CASE("ring: a rank asleep on shared memory is woken at once by its neighbour's data", "[ring][shm]") {
  // Rank 0 sleeps on the channel's futex for 50 ms each round before rank 1 sends. A lost wake-up
  // would leave it asleep until its next check, 20 ms later; the median over 7 rounds allows for a
  // busy machine's scheduling but not for that.
  const JobResult job = spawn_ranks(2, kWorker, {"wake", "shm"}, {{"VICTIM", "1"}}, std::chrono::seconds(60));
  INFO(all_output(job));
  REQUIRE(all_succeeded(job));
  const std::string& out = job.ranks[0].output;
  const std::vector<double> median = numbers_after(out, "; median ");
  REQUIRE(median.size() == 1);
  CHECK(median[0] < 5.0);
  // It slept rather than spun: about 7 x 50 ms waited, on a few ms of CPU.
  const size_t waited_at = out.find("waited ");
  REQUIRE(waited_at != std::string::npos);
  double waited_ms = 0, cpu_ms = 0;
  REQUIRE(std::sscanf(out.c_str() + waited_at, "waited %lf ms on %lf ms of CPU", &waited_ms, &cpu_ms) == 2);
  CHECK(waited_ms > 300);
  CHECK(cpu_ms < 0.1 * waited_ms);
}

TEST_CASE("ring: a rank killed while its neighbour sleeps on shared memory fails the ring fast, naming it",
          "[ring][shm]") {
  const int world = GENERATE(2, 3);
  const JobResult job = spawn_ranks(world, kWorker, {"die_asleep", "shm"}, {{"VICTIM", "1"}, {"TIMEOUT_MS", "60000"}},
                                    std::chrono::seconds(30));
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  CHECK(job.ranks[1].signal == 9);
  for (int r = 0; r < world; ++r) {
    if (r == 1) continue;
    CHECK(job.ranks[r].exit_code == 3);
    CHECK(job.ranks[r].output.find("rank 1") != std::string::npos);
    // 300 ms asleep before the kill, then at most a check interval or two (the ranks not next to
    // rank 1 learn it from their neighbours' aborts).
    const std::vector<double> into = numbers_after(job.ranks[r].output, "failed ");
    REQUIRE(into.size() == 1);
    CHECK(into[0] < 2000);
  }
  // The rank after rank 1 waits for its data, and sees it die; the others hear of it from it.
  const std::string& after = job.ranks[2 % world].output;
  CHECK(after.find("rank 1 (pid ") != std::string::npos);
  CHECK(after.find(") died during") != std::string::npos);
}

TEST_CASE("ring: a slow rank within the timeout is waited for", "[ring]") {
  const JobResult job = spawn_ranks(3, kWorker, {"slow", "shm"}, {{"VICTIM", "2"}, {"TIMEOUT_MS", "10000"}});
  INFO(all_output(job));
  CHECK(all_succeeded(job));
}

TEST_CASE("ring: ranks that disagree on a tensor's size get an error naming both sizes", "[ring]") {
  const std::string transport = GENERATE(std::string("shm"), std::string("tcp"));
  const JobResult job = spawn_ranks(2, kWorker, {"mismatch", transport}, {{"VICTIM", "1"}, {"TIMEOUT_MS", "5000"}},
                                    std::chrono::seconds(20));
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  bool named = false;
  for (const auto& r : job.ranks) {
    CHECK(r.exit_code == 3);
    named = named || (r.output.find("expected") != std::string::npos && r.output.find("bytes") != std::string::npos);
  }
  CHECK(named);
}

TEST_CASE("ring: a stopped rank 0 fails the others once, within 1.1x the timeout", "[ring]") {
  // SIGSTOP keeps rank 0's sockets, shared memory -- and the store it serves -- open but silent. The
  // survivor times out in the all-reduce; asking the store who failed first must not then cost a
  // second full timeout, nor a fixed 3 s (13.1 s for a 10 s timeout): a twentieth of it, 0.4 s here.
  // Over TCP too, the survivor says its neighbour is stopped: the neighbours on one host tell each
  // other their pids when they connect.
  const std::string transport = GENERATE(std::string("shm"), std::string("tcp"));
  const TempDir dir;
  const JobResult job =
      spawn_ranks(2, kWorker, {"stop", transport}, {{"VICTIM", "0"}, {"TIMEOUT_MS", "8000"}, {"PID_DIR", dir.str()}},
                  std::chrono::seconds(40));
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  CHECK(job.ranks[1].exit_code == 3);
  // "rank 0 (pid N) is stopped", over TCP "rank 0 at 127.0.0.1 (pid N) is stopped"
  const std::string stopped = transport == "shm" ? "rank 0 (pid " : "rank 0 at 127.0.0.1 (pid ";
  CHECK(job.ranks[1].output.find(stopped) != std::string::npos);
  CHECK(job.ranks[1].output.find(") is stopped (SIGSTOP") != std::string::npos);
  const long long took = error_after_ms(job.ranks[1].output);
  CHECK(took >= 7500);
  CHECK(took < 8800);  // 1.1x; before: 11 s (a fixed 3 s diagnostic), and earlier 16 s (a second timeout)
}

TEST_CASE("ring: a job stopped longer than the timeout and continued carries on", "[ring]") {
  // Ctrl-Z under ringrun stops every rank; after `fg` the time stopped must not count against the
  // deadline of the all-reduce they were in. Rank 0 is continued 100 ms before rank 1, so it looks
  // at its deadline first: before, it failed there ("timed out"), 4 s after a 2 s deadline.
  const std::string transport = GENERATE(std::string("shm"), std::string("tcp"));
  const TempDir dir;
  const JobResult job =
      spawn_ranks(2, kWorker, {"stop_both", transport},
                  {{"VICTIM", "1"}, {"TIMEOUT_MS", "2000"}, {"PID_DIR", dir.str()}}, std::chrono::seconds(40));
  INFO(all_output(job));
  CHECK(all_succeeded(job));
}

TEST_CASE("ring: silent clients at a ring listener cost setup nothing, however many", "[ring]") {
  // Rank 0's listener gets the silent clients first, then rank 1 -- the real peer -- behind them.
  // Checked one at a time, 5 s each, 12 of them held a 60 s setup for all of it.
  // A flood goes on around the real peer too (INTRUDERS_AFTER, more than the 64 held at a time), and
  // the job token is as long as a token may be (it once overflowed the introduction's buffer).
  const int intruders = GENERATE(1, 12);
  const int after = GENERATE(0, 200);
  const JobResult job = spawn_ranks(2, kWorker, {"intruder", "tcp"},
                                    {{"VICTIM", "1"},
                                     {"TIMEOUT_MS", "60000"},
                                     {"RINGGRAD_JOB_TOKEN", std::string(256, 't')},
                                     {"INTRUDERS", std::to_string(intruders)},
                                     {"INTRUDERS_AFTER", std::to_string(after)}},
                                    std::chrono::seconds(80));
  INFO(all_output(job));
  CHECK(all_succeeded(job, true));
  CHECK(job.ranks[1].output.find(std::to_string(intruders) + " silent client") != std::string::npos);
  CHECK(job.ranks[0].output.find("closed ") != std::string::npos);
  CHECK(job.seconds < 15);  // not 5 s per client, nor the setup deadline
}

TEST_CASE("ring: a rank killed during setup leaves nothing in /dev/shm", "[ring]") {
  // Rank 0 creates its channel, then waits for rank 1's, which is slow to come; rank 0 is killed
  // meanwhile. A named segment would stay in /dev/shm with nobody to remove it.
  const auto ours = [] {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
      if (std::regex_match(entry.path().filename().string(), std::regex("ringgrad-[0-9a-f]+-[0-9]+")))
        names.insert(entry.path().filename());  // what a named channel was called
    return names;
  };
  const std::set<std::string> before = ours();
  const JobResult job =
      spawn_ranks(2, kWorker, {"die_in_setup", "shm"}, {{"VICTIM", "0"}, {"SLOW_MS", "5000"}, {"TIMEOUT_MS", "20000"}},
                  std::chrono::seconds(40));
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  CHECK(job.ranks[1].output.find("rank 0's channel is published") != std::string::npos);  // before rank 0 died
  CHECK(job.ranks[0].signal == SIGALRM);
  CHECK(job.ranks[1].exit_code == 3);
  std::vector<std::string> left;
  for (const std::string& name : ours())
    if (!before.count(name)) left.push_back(name);
  CHECK(left.empty());
}

TEST_CASE("ring: a rank that never arrives is reported while waited for, then named at the deadline", "[ring]") {
  const int absent = GENERATE(0, 1);
  const JobResult job =
      spawn_ranks(2, kWorker, {"absent", "auto"}, {{"VICTIM", std::to_string(absent)}, {"TIMEOUT_MS", "6500"}},
                  std::chrono::seconds(30));
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  const std::string& waiting = job.ranks[1 - absent].output;
  CHECK(job.ranks[1 - absent].exit_code == 3);
  const long long took = error_after_ms(waiting);
  CHECK(took >= 6000);
  CHECK(took < 12000);
  if (absent == 1) {
    // Rank 0 serves the store: it knows who joined, and says so before the deadline.
    CHECK(waiting.find("rendezvous: 1 of 2 ranks joined; waiting for rank 1 at 127.0.0.1:") != std::string::npos);
    CHECK(waiting.find("rendezvous timed out") != std::string::npos);
  } else {
    // Rank 1 cannot even reach the store.
    CHECK(waiting.find("rendezvous: waiting for rank 0's store at 127.0.0.1:") != std::string::npos);
    CHECK(waiting.find("could not connect") != std::string::npos);
  }
}

TEST_CASE("ring: a rank with another job's token is refused at once, and rank 0's timeout says so", "[ring]") {
  const JobResult job =
      spawn_ranks(2, kWorker, {"one", "auto"},
                  {{"VICTIM", "1"}, {"TIMEOUT_MS", "3000"}, {"RINGGRAD_JOB_TOKEN", "ours"}, {"VICTIM_TOKEN", "theirs"}},
                  std::chrono::seconds(30));
  INFO(all_output(job));
  CHECK(job.ranks[1].exit_code == 3);
  CHECK(error_after_ms(job.ranks[1].output) < 1500);
  CHECK(job.ranks[1].output.find("did not accept this connection") != std::string::npos);
  CHECK(job.ranks[0].exit_code == 3);
  CHECK(job.ranks[0].output.find("the store refused 1 connection with another job token (RINGGRAD_JOB_TOKEN)") !=
        std::string::npos);
}

TEST_CASE("ring: two processes that claim the same rank are stopped at the rendezvous, naming both", "[ring]") {
  // Of three processes, the third also says RANK=1: whichever of the two claims rank 1 second fails
  // at once; the others then wait for rank 2, which never came.
  const JobResult job =
      spawn_ranks(3, kWorker, {"one", "auto"}, {{"VICTIM", "2"}, {"VICTIM_RANK", "1"}, {"TIMEOUT_MS", "3000"}},
                  std::chrono::seconds(30));
  INFO(all_output(job));
  int refused = 0;
  for (int r : {1, 2}) {
    const std::string& out = job.ranks[r].output;
    if (out.find("rank 1 was already claimed by another process") == std::string::npos) continue;
    ++refused;
    CHECK(out.find("Does every process get its own RANK?") != std::string::npos);
    CHECK(error_after_ms(out) < 1500);
  }
  CHECK(refused == 1);
  CHECK(job.ranks[0].output.find("waiting for rank 2") != std::string::npos);
}

TEST_CASE("ring: a rank of another job at this job's store is refused, naming both job ids", "[ring]") {
  // The victim (rank 1) carries another torchrun run id than rank 0.
  const JobResult job = spawn_ranks(
      2, kWorker, {"one", "auto"},
      {{"VICTIM", "1"}, {"TIMEOUT_MS", "3000"}, {"TORCHELASTIC_RUN_ID", "run-a"}, {"VICTIM_RUN_ID", "run-b"}},
      std::chrono::seconds(30));
  INFO(all_output(job));
  CHECK(job.ranks[1].exit_code == 3);
  CHECK(error_after_ms(job.ranks[1].output) < 1500);
  CHECK(job.ranks[1].output.find("belongs to another job (its rank 0 was started as torchrun run-a, this rank as "
                                 "torchrun run-b)") != std::string::npos);
}

TEST_CASE("ring: without RINGGRAD_JOB_TOKEN rank 0 warns once that the job is not authenticated", "[ring]") {
  const bool token = GENERATE(false, true);
  std::vector<std::pair<std::string, std::string>> env = {{"RINGGRAD_JOB_TOKEN", token ? "t0k3n" : ""}};
  const JobResult job = spawn_ranks(2, kWorker, {"one", "auto"}, env);
  INFO(all_output(job));
  CHECK(all_succeeded(job, true));
  CHECK(count(job.ranks[0].output, "not authenticated") == (token ? 0u : 1u));
  CHECK(count(job.ranks[1].output, "not authenticated") == 0u);
}

TEST_CASE("ring: under torchrun, whose agent holds MASTER_PORT, ringgrad's store takes the next port", "[ring]") {
  // The agent's store, played by a listener that is never answered; ringgrad must not even try it.
  const ringgrad::parallel::Listener agent("127.0.0.1", ringgrad::test::free_port_pair());
  const std::string port = std::to_string(agent.port());
  const JobResult job =
      spawn_ranks(2, kWorker, {"one", "auto"},
                  {{"MASTER_PORT", port}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RUN_ID", "test"}},
                  std::chrono::seconds(30));
  INFO(all_output(job));
  CHECK(all_succeeded(job, true));
  CHECK(job.ranks[0].output.find("uses port " + std::to_string(agent.port() + 1)) != std::string::npos);
}

#ifdef RINGGRAD_MPIRUN_PATH
TEST_CASE("ring: a job started by Open MPI's mpirun reads its ranks from OMPI_COMM_WORLD_*", "[ring]") {
  // mpirun sets no RANK, WORLD_SIZE or MASTER_ADDR; only the port is passed, so parallel tests do
  // not meet on the default 29500. The ranks' output goes through mpirun's.
  const std::string port = std::to_string(ringgrad::test::free_port());
  const LauncherRun run(std::string(RINGGRAD_MPIRUN_PATH) +
                        " --allow-run-as-root --oversubscribe -np 2 -x MASTER_PORT=" + port + " " + kWorker +
                        " collectives shm");
  const std::string& output = run.output;
  INFO(run.command << "\n" << output);
  CHECK(run.status == 0);
  CHECK(output.find("rank 0: ok") != std::string::npos);
  CHECK(output.find("rank 1: ok") != std::string::npos);
  CHECK(output.find("rank 1 transport shm") != std::string::npos);
}
#endif

#ifdef RINGGRAD_TORCHRUN_PYTHON
TEST_CASE("ring: a job started by torchrun, whose agent holds MASTER_PORT, meets on the next port", "[ring]") {
  // --redirects 1 --tee 1: torch 1.13's torchrun cannot parse its default "0" on Python 3.11 (enum
  // iteration changed), and a non-zero value avoids that path; the output still reaches us.
  const TempDir logs;
  const int port = ringgrad::test::free_port_pair();  // torchrun's agent takes it, ringgrad's store the next
  const LauncherRun run(std::string(RINGGRAD_TORCHRUN_PYTHON) +
                        " -m torch.distributed.run --nproc_per_node 2 --redirects 1 --tee 1 --log_dir " + logs.str() +
                        " --no_python --master_port " + std::to_string(port) + " " + kWorker + " one auto");
  const std::string& output = run.output;
  INFO(run.command << "\n" << output);
  CHECK(run.status == 0);
  CHECK(output.find("rank 0: ok") != std::string::npos);
  CHECK(output.find("rank 1: ok") != std::string::npos);
  CHECK(output.find("uses port " + std::to_string(port + 1)) != std::string::npos);
}
#endif

TEST_CASE("ring: the ring goes host by host, shared memory inside a host and TCP between hosts", "[ring]") {
  using ringgrad::parallel::ring_neighbours;
  using ringgrad::parallel::ring_order;
  // Ranks numbered host by host keep rank order; a cyclic placement (rank r on host r % 2) does not.
  CHECK(ring_order({"a", "a", "b", "b"}) == std::vector<int>{0, 1, 2, 3});
  CHECK(ring_order({"a", "b", "a", "b"}) == std::vector<int>{0, 2, 1, 3});
  CHECK(ring_order({"b", "a", "c", "a", "b", "c"}) == std::vector<int>{0, 4, 1, 3, 2, 5});
  CHECK(ring_order({"x"}) == std::vector<int>{0});

  const std::vector<std::string> hosts = {"a", "b", "a", "b", "a"};
  const std::vector<int> order = ring_order(hosts);  // 0 2 4 | 1 3
  REQUIRE(order == std::vector<int>{0, 2, 4, 1, 3});
  const auto middle = ring_neighbours(order, hosts, 2, "auto");  // between two ranks of its host
  CHECK((middle.prev == 0 && middle.next == 4 && middle.from_prev == "shm" && middle.to_next == "shm"));
  const auto end = ring_neighbours(order, hosts, 4, "auto");  // the last of host a, then host b
  CHECK((end.prev == 2 && end.next == 1 && end.from_prev == "shm" && end.to_next == "tcp"));
  const auto wrap = ring_neighbours(order, hosts, 0, "auto");  // the ring closes from host b to a
  CHECK((wrap.prev == 3 && wrap.next == 2 && wrap.from_prev == "tcp" && wrap.to_next == "shm"));
  const auto forced = ring_neighbours(order, hosts, 4, "tcp");
  CHECK((forced.from_prev == "tcp" && forced.to_next == "tcp"));
}
