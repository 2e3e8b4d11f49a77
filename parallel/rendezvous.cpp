// parallel/rendezvous.cpp: announce, then wait in rounds that end at each progress report.
#include "parallel/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/error.h"
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

}  // namespace

void rendezvous(Store& store, int rank, int world_size, const std::string& store_address, milliseconds timeout) {
  const net::Deadline deadline = net::deadline_in(timeout);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  store.set(joined_key(rank), detail::str(host, " pid ", ::getpid()));

  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r)
    if (r != rank) missing.push_back(r);
  // A rank that points at the right store with the wrong token never joins; the server knows.
  const TCPStore* served = rank == 0 ? dynamic_cast<const TCPStore*>(&store) : nullptr;
  auto progress = [&] {
    const int64_t refused = served != nullptr ? served->refused_connections() : 0;
    return detail::str(world_size - static_cast<int>(missing.size()), " of ", world_size, " ranks joined; waiting for ",
                       name_ranks(missing), " at ", store_address,
                       refused > 0 ? detail::str(" (the store refused ", refused, refused == 1 ? " connection" :
                                                 " connections", " without this job's RINGGRAD_JOB_TOKEN)")
                                   : std::string());
  };
  net::WaitReporter reporter([&](milliseconds waited) {
    std::fprintf(stderr, "rendezvous: %s (%lld s of %lld s)\n", progress().c_str(), whole_seconds(waited),
                 whole_seconds(timeout));
    std::fflush(stderr);
  });
  while (!missing.empty()) {
    const net::Clock::time_point now = net::Clock::now();
    if (now >= deadline) {
      throw Error(detail::str("init_process_group: rendezvous timed out after ", timeout.count(), " ms: ", progress(),
                              ", which never arrived. Is every rank started, with the same MASTER_ADDR, MASTER_PORT "
                              "and WORLD_SIZE? (RINGGRAD_TIMEOUT=seconds waits longer)"));
    }
    // One round: wait for (up to the store's limit of) the missing keys until the next report is due.
    const net::Clock::time_point round_end = std::min(deadline, reporter.next_report());
    const milliseconds limit =
        std::max(milliseconds(1), std::chrono::ceil<milliseconds>(round_end - now));
    const size_t n = std::min(missing.size(), kMaxKeysPerWait);
    std::vector<std::string> keys;
    for (size_t i = 0; i < n; ++i) keys.push_back(joined_key(missing[i]));
    const std::vector<std::string> still = store.wait_for(keys, limit);
    std::vector<int> next;
    for (size_t i = 0; i < n; ++i)
      if (std::find(still.begin(), still.end(), keys[i]) != still.end()) next.push_back(missing[i]);
    next.insert(next.end(), missing.begin() + static_cast<std::ptrdiff_t>(n), missing.end());
    missing = std::move(next);
    if (!missing.empty()) reporter.poll();
  }
}

}  // namespace parallel
}  // namespace ringgrad
