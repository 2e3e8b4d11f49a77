// tests/parallel/test_ring_hierarchical.cpp: the ring's hierarchical all-reduce, and choosing it.
//
// The hosts are emulated on this machine without root: the worker's HOST_IDS gives each rank its
// RINGGRAD_HOST_ID, so the ring treats ranks with different ids as different hosts -- TCP between
// them -- while ranks with the same id share memory. Every result is checked against directly
// computed answers and, bit for bit, against the flat ring's; the failures must not hang, and must
// name the rank that caused them.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <ringgrad/parallel/process_group.h>
#include "parallel/ring/ring_order.h"
#include "parallel/ring/ring_process_group.h"
#include "spawn_ranks.h"
#include "test_util.h"

using ringgrad::test::all_output;
using ringgrad::test::all_succeeded;
using ringgrad::test::JobResult;
using ringgrad::test::spawn_ranks;

namespace {

const std::string kWorker = RINGGRAD_DIST_WORKER_PATH;

// HOST_IDS for `hosts` hosts of `per_host` ranks each, numbered host by host: "h0,h0,h1,h1".
std::string host_ids(int hosts, int per_host) {
  std::string ids;
  for (int r = 0; r < hosts * per_host; ++r) ids += (r == 0 ? "h" : ",h") + std::to_string(r / per_host);
  return ids;
}

// The rest of the line after `what` in `output` ("" when absent): a hash, an algorithm's name.
std::string after(const std::string& output, const std::string& what) {
  const size_t at = output.find(what);
  if (at == std::string::npos) return "";
  const size_t from = at + what.size();
  return output.substr(from, output.find('\n', from) - from);
}

// The number after "error after " in a worker's output: how long it took that rank to fail.
long long failed_after_ms(const std::string& output) {
  const std::string ms = after(output, "error after ");
  return ms.empty() ? -1 : std::stoll(ms);
}

// Sets an environment variable (nullptr: unsets it) for one scope.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~EnvVar() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("ring hierarchical: exact on emulated hosts, and bitwise the flat ring's result", "[ring]") {
  const auto [hosts, per_host] = GENERATE(table<int, int>({{2, 2}, {3, 2}, {2, 3}}));
  const int world = hosts * per_host;
  INFO(hosts << " hosts x " << per_host << " ranks");
  std::set<std::string> hashes;
  // "" (unset): "auto", which is hierarchical here.
  for (const std::string algorithm : {"", "flat"}) {
    const JobResult job =
        spawn_ranks(world, kWorker, {"exact", "auto"},
                    {{"HOST_IDS", host_ids(hosts, per_host)}, {"RINGGRAD_RING_ALGORITHM", algorithm}});
    INFO("algorithm \"" << algorithm << "\"\n" << all_output(job));
    REQUIRE(all_succeeded(job, true));
    for (int r = 0; r < world; ++r) {
      const std::string& out = job.ranks[r].output;
      CHECK(after(out, "algorithm ") == (algorithm.empty() ? "hierarchical" : "flat"));
      // TCP across the emulated hosts: a host's first and last rank have one link of each kind.
      const int local = r % per_host;
      CHECK(after(out, "transport ") == (local == 0 || local == per_host - 1 ? "shm+tcp" : "shm"));
      hashes.insert(after(out, "exact hash "));
    }
  }
  CHECK(hashes.size() == 1);  // every rank, both algorithms
  CHECK(hashes.count("") == 0);
}

TEST_CASE("ring hierarchical: every collective is exact on 2 emulated hosts of 2 ranks", "[ring]") {
  // all_reduce goes hierarchical; broadcast, all_gather, reduce_scatter and barrier keep the job's ring.
  const JobResult job = spawn_ranks(4, kWorker, {"collectives", "auto"}, {{"HOST_IDS", host_ids(2, 2)}});
  INFO(all_output(job));
  CHECK(all_succeeded(job, true));
  for (const auto& r : job.ranks) CHECK(after(r.output, "algorithm ") == "hierarchical");
}

TEST_CASE("ring hierarchical: random all-reduces are bitwise identical on every rank and every run", "[ring]") {
  std::set<std::string> hashes;
  for (int run = 0; run < 2; ++run) {
    const JobResult job = spawn_ranks(4, kWorker, {"determinism", "auto"}, {{"HOST_IDS", host_ids(2, 2)}});
    INFO(all_output(job));
    REQUIRE(all_succeeded(job));
    for (const auto& r : job.ranks) {
      CHECK(after(r.output, "algorithm ") == "hierarchical");
      hashes.insert(after(r.output, "hash "));
    }
  }
  CHECK(hashes.size() == 1);
}

TEST_CASE("ring algorithm auto: flat on one host, on one rank per host and on unequal hosts", "[ring]") {
  // One host of 4; 3 hosts of 1; 2 ranks on one host and 1 on another.
  const std::string ids = GENERATE(std::string(""), std::string("a,b,c"), std::string("a,a,b"));
  const int world = ids.empty() ? 4 : 3;
  const JobResult job = spawn_ranks(world, kWorker, {"one", "auto"}, {{"HOST_IDS", ids}});
  INFO("HOST_IDS=" << ids << "\n" << all_output(job));
  CHECK(all_succeeded(job, true));
  for (const auto& r : job.ranks) CHECK(after(r.output, "algorithm ") == "flat");
}

TEST_CASE("ring algorithm hierarchical: refused by every rank where the hosts cannot have it", "[ring]") {
  const auto [ids, world, got] = GENERATE(table<std::string, int, std::string>(
      {{"a,a,b", 3, "got hosts with 2 and 1 ranks"}, {"", 2, "got 1 host with 2 ranks"}}));
  const JobResult job =
      spawn_ranks(world, kWorker, {"one", "auto"},
                  {{"HOST_IDS", ids}, {"RINGGRAD_RING_ALGORITHM", "hierarchical"}, {"TIMEOUT_MS", "20000"}},
                  std::chrono::seconds(30));
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  for (const auto& r : job.ranks) {
    CHECK(r.exit_code == 3);
    CHECK(r.output.find("ring: algorithm \"hierarchical\" needs 2 or more hosts with the same number (>= 2) of ranks "
                        "each, " +
                        got) != std::string::npos);
    CHECK(failed_after_ms(r.output) < 5000);  // at setup, not at its deadline
  }
}

TEST_CASE("ring algorithm: a bad RINGGRAD_RING_ALGORITHM fails every rank before it meets the others", "[ring]") {
  const JobResult job =
      spawn_ranks(2, kWorker, {"one", "auto"}, {{"RINGGRAD_RING_ALGORITHM", "tree"}}, std::chrono::seconds(30));
  INFO(all_output(job));
  for (const auto& r : job.ranks) {
    CHECK(r.exit_code == 3);
    CHECK(
        r.output.find("expected RINGGRAD_RING_ALGORITHM to be \"auto\", \"flat\" or \"hierarchical\", got \"tree\"") !=
        std::string::npos);
    CHECK(failed_after_ms(r.output) < 1500);
  }
}

TEST_CASE("ring algorithm: ranks that ask for different algorithms all fail at setup, naming both", "[ring]") {
  const JobResult job = spawn_ranks(
      4, kWorker, {"one", "auto"},
      {{"HOST_IDS", host_ids(2, 2)}, {"VICTIM", "2"}, {"VICTIM_ALGORITHM", "flat"}, {"TIMEOUT_MS", "20000"}},
      std::chrono::seconds(30));
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  for (const auto& r : job.ranks) {
    CHECK(r.exit_code == 3);
    // "rank 2 asks for algorithm "flat" and rank 0 for "auto"", or from rank 2 the other way round.
    const std::string& out = r.output;
    CHECK(out.find("every rank must ask for the same") != std::string::npos);
    CHECK(out.find("\"flat\"") != std::string::npos);
    CHECK(out.find("\"auto\"") != std::string::npos);
    CHECK(failed_after_ms(r.output) < 5000);
  }
}

TEST_CASE("ring hierarchical: a rank killed mid all-reduce makes the others fail fast and name it", "[ring]") {
  // The victim's neighbours on the host's ring, on the ring across hosts, and the ranks on neither.
  const auto [hosts, per_host, victim] = GENERATE(table<int, int, int>({{2, 2, 1}, {2, 2, 2}, {3, 2, 3}}));
  const int world = hosts * per_host;
  INFO(hosts << " hosts x " << per_host << " ranks, victim " << victim);
  // A 60 s timeout: the survivors must notice the death itself, long before the deadline.
  const JobResult job = spawn_ranks(
      world, kWorker, {"die", "auto"},
      {{"HOST_IDS", host_ids(hosts, per_host)}, {"VICTIM", std::to_string(victim)}, {"TIMEOUT_MS", "60000"}},
      std::chrono::seconds(30));
  INFO(all_output(job));
  CHECK_FALSE(job.timed_out);
  CHECK(job.seconds < 10);
  CHECK(job.ranks[victim].signal == 9);
  for (int r = 0; r < world; ++r) {
    if (r == victim) continue;
    CHECK(after(job.ranks[r].output, "algorithm ") == "hierarchical");
    CHECK(job.ranks[r].exit_code == 3);
    CHECK(job.ranks[r].output.find("rank " + std::to_string(victim) + " at 127.0.0.1") != std::string::npos);
  }
}

TEST_CASE("ring algorithm: chosen in code, else by RINGGRAD_RING_ALGORITHM, else auto", "[ring]") {
  using ringgrad::parallel::InitOptions;
  using ringgrad::parallel::RingOptions;
  using ringgrad::parallel::RingProcessGroup;
  const EnvVar unset("RINGGRAD_RING_ALGORITHM", nullptr);
  CHECK(std::string(RingProcessGroup(nullptr, 0, 1).algorithm_name()) == "flat");
  CHECK(std::string(RingProcessGroup(nullptr, 0, 1, RingOptions().algorithm("flat")).algorithm_name()) == "flat");
  CHECK_ERROR(RingProcessGroup(nullptr, 0, 1, RingOptions().algorithm("tree")),
              "ring: expected algorithm \"auto\", "
              "\"flat\" or \"hierarchical\", got \"tree\"");
  CHECK_ERROR(RingProcessGroup(nullptr, 0, 1, RingOptions().algorithm("hierarchical")), "algorithm \"hierarchical\"",
              "got 1 host with 1 rank;");
  {
    const EnvVar bad("RINGGRAD_RING_ALGORITHM", "Flat");
    CHECK_ERROR(RingProcessGroup(nullptr, 0, 1), "RINGGRAD_RING_ALGORITHM", "got \"Flat\"");
    // The code's choice comes first, as for every launch variable.
    CHECK(std::string(RingProcessGroup(nullptr, 0, 1, RingOptions().algorithm("auto")).algorithm_name()) == "flat");
  }
  // init_process_group refuses a bad one before meeting anyone.
  CHECK_ERROR(
      ringgrad::parallel::init_process_group("ring", InitOptions().rank(0).world_size(1).ring_algorithm("ring")),
      "expected algorithm", "got \"ring\"");
}

TEST_CASE("ring hierarchical: the ring inside each host and the rings across hosts", "[ring]") {
  using ringgrad::parallel::cross_host_ring;
  using ringgrad::parallel::host_ring;
  using ringgrad::parallel::ranks_per_host;
  using ringgrad::parallel::ring_order;
  CHECK(ranks_per_host({"a", "a", "b", "b"}) == std::vector<int>{2, 2});
  CHECK(ranks_per_host({"b", "a", "b"}) == std::vector<int>{2, 1});  // hosts in ring order: b first
  CHECK(ranks_per_host({"x"}) == std::vector<int>{1});
  // Slurm's cyclic placement, rank r on host r % 2: the ring is 0 2 4 | 1 3 5.
  const std::vector<std::string> hosts = {"a", "b", "a", "b", "a", "b"};
  const std::vector<int> order = ring_order(hosts);
  REQUIRE(order == std::vector<int>{0, 2, 4, 1, 3, 5});
  CHECK(host_ring(order, hosts, 4) == std::vector<int>{0, 2, 4});
  CHECK(host_ring(order, hosts, 3) == std::vector<int>{1, 3, 5});
  // Place 0 of each host, place 1, place 2: ranks 0 and 1, 2 and 3, 4 and 5.
  CHECK(cross_host_ring(order, hosts, 0) == std::vector<int>{0, 1});
  CHECK(cross_host_ring(order, hosts, 3) == std::vector<int>{2, 3});
  CHECK(cross_host_ring(order, hosts, 4) == std::vector<int>{4, 5});
}
