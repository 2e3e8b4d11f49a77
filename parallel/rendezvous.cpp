// parallel/rendezvous.cpp: check the job, claim the rank, count in, then wait for the last arrival.
//
// Keys (all in the job's own store):
//   rendezvous/job          rank 0's launcher job id: a rank of another job stops here
//   rendezvous/rank/<r>     a counter: the first process to claim rank r gets 1, a duplicate 2
//   rendezvous/joined/<r>   "host pid N" of rank r, for messages
//   rendezvous/count        how many ranks joined; the one that makes it world_size sets ...
//   rendezvous/done         ... which every rank waits for
// Waiting on one key keeps the store's work per arrival constant; which ranks are missing is only
// worked out when there is something to report, from the joined keys.
#include <ringgrad/parallel/rendezvous.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include <ringgrad/core/base/error.h>
#include "parallel/socket.h"

namespace ringgrad {
namespace parallel {
namespace {

using std::chrono::milliseconds;

constexpr size_t kMaxKeysPerWait = 1024;  // the store's limit for one request
constexpr size_t kRanksNamed = 8;         // a message names at most this many missing ranks

std::string joined_key(int rank) { return "rendezvous/joined/" + std::to_string(rank); }

// "rank 1", "ranks 1, 4, 7", "ranks 1, 2, 3, 4, 5, 6, 7, 8 and 92 more"
std::string name_ranks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < kRanksNamed; ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kRanksNamed) text += detail::str(" and ", ranks.size() - kRanksNamed, " more");
  return text;
}

long long whole_seconds(milliseconds t) { return static_cast<long long>((t.count() + 500) / 1000); }

// The ranks that have not joined yet: the joined keys still missing, asked for in batches the
// store accepts (a wait of 1 ms answers with the keys it lacks).
std::vector<int> missing_ranks(Store& store, int world_size) {
  std::vector<int> missing;
  for (int first = 0; first < world_size; first += static_cast<int>(kMaxKeysPerWait)) {
    const int last = std::min(world_size, first + static_cast<int>(kMaxKeysPerWait));
    std::vector<std::string> keys;
    for (int r = first; r < last; ++r) keys.push_back(joined_key(r));
    const std::vector<std::string> absent = store.wait_for(keys, milliseconds(1));
    for (int r = first; r < last; ++r)
      if (std::find(absent.begin(), absent.end(), keys[static_cast<size_t>(r - first)]) != absent.end())
        missing.push_back(r);
  }
  return missing;
}

}  // namespace

void rendezvous(Store& store, const RendezvousInfo& me, milliseconds timeout) {
  const Deadline deadline = deadline_in(timeout);
  const int rank = me.rank, world_size = me.world_size;

  // 1. The job. Rank 0 opened this store a moment ago, so its key is there at once.
  if (rank == 0) {
    store.set("rendezvous/job", me.job_id);
  } else {
    const std::string theirs = store.get_string("rendezvous/job");
    RINGGRAD_CHECK(theirs.empty() || me.job_id.empty() || theirs == me.job_id, "init_process_group: the store at ",
                   me.store_address, " belongs to another job (its rank 0 was started as ", detail::printable(theirs),
                   ", this rank as ", me.job_id,
                   "); do two jobs share MASTER_ADDR and MASTER_PORT? Give each "
                   "its own MASTER_PORT");
  }

  // 2. The rank: two processes with the same RANK would each wait for a neighbour that is the other.
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string who = detail::str(host, " pid ", ::getpid());
  if (store.add("rendezvous/rank/" + std::to_string(rank), 1) != 1) {
    std::string first;
    try {
      const ScopedStoreTimeout brief(store, milliseconds(1000));
      first = " (" + detail::printable(store.get_string(joined_key(rank))) + ")";  // from the network
    } catch (const std::exception&) {
    }
    throw Error(detail::str("init_process_group: rank ", rank, " was already claimed by another process", first,
                            "; this one is ", who, ". Does every process get its own RANK?"));
  }
  store.set(joined_key(rank), who);
  if (store.add("rendezvous/count", 1) == world_size) store.set("rendezvous/done", "1");

  // 3. Wait for the last arrival, in rounds that end when a progress line is due.
  auto progress = [&](const std::vector<int>& missing) {
    std::string text = detail::str(world_size - static_cast<int>(missing.size()), " of ", world_size,
                                   " ranks joined; waiting for ", name_ranks(missing), " at ", me.store_address);
    // A rank that points at the right store with the wrong token never joins; rank 0's server knows.
    const TCPStore* served = rank == 0 ? dynamic_cast<const TCPStore*>(&store) : nullptr;
    const TCPStore::Refused refused = served != nullptr ? served->refused_connections() : TCPStore::Refused{};
    if (refused.wrong_token > 0)
      text += detail::str("; the store refused ", refused.wrong_token, " connection",
                          refused.wrong_token == 1 ? "" : "s", " with another job token (RINGGRAD_JOB_TOKEN)");
    if (refused.silent > 0)
      text += detail::str("; ", refused.silent, " connection", refused.silent == 1 ? "" : "s",
                          " sent nothing within the handshake limit");
    return text;
  };
  WaitReporter reporter([&](milliseconds waited) {
    std::fprintf(stderr, "rendezvous: %s (%lld s of %lld s)\n", progress(missing_ranks(store, world_size)).c_str(),
                 whole_seconds(waited), whole_seconds(timeout));
    std::fflush(stderr);
  });
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      throw Error(detail::str("init_process_group: rendezvous timed out after ", timeout.count(),
                              " ms: ", progress(missing_ranks(store, world_size)),
                              ", which never arrived. Is every rank "
                              "started, with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE? (RINGGRAD_TIMEOUT="
                              "seconds waits longer)"));
    }
    const Clock::time_point round_end = std::min(deadline, reporter.next_report());
    const milliseconds limit = std::max(milliseconds(1), std::chrono::ceil<milliseconds>(round_end - now));
    if (store.wait_for({"rendezvous/done"}, limit).empty()) return;
    reporter.poll();
  }
}

}  // namespace parallel
}  // namespace ringgrad
