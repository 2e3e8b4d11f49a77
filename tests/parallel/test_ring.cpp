// tests/parallel/test_ring.cpp: the ring backend across real processes.
//
// Each test starts `ringgrad_dist_worker` as the ranks of a job (spawn_ranks.h) on this machine:
// every collective x dtype x awkward length x world size 1..4 against directly computed answers,
// over shared memory and over TCP; bitwise-identical results on every rank and every run; and the
// failures that must not hang -- a rank killed in the middle of an all-reduce, ranks that disagree
// on sizes -- plus a slow rank that must not fail.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "spawn_ranks.h"

using ringgrad::test::all_output;
using ringgrad::test::all_succeeded;
using ringgrad::test::JobResult;
using ringgrad::test::spawn_ranks;

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
  const JobResult job =
      spawn_ranks(world, kWorker, {"die", transport}, {{"VICTIM", "1"}, {"TIMEOUT_MS", "60000"}}, std::chrono::seconds(30));
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
