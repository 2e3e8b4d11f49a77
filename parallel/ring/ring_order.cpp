// parallel/ring/ring_order.cpp: the ring host by host (ring_order.h).
#include "parallel/ring/ring_order.h"

#include <algorithm>

namespace ringgrad {
namespace parallel {

std::vector<int> ring_order(const std::vector<std::string>& host_of_rank) {
  // Hosts in the order they first appear (their lowest rank), then each host's ranks in rank order.
  std::vector<std::string> hosts;
  for (const std::string& h : host_of_rank)
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  std::vector<int> order;
  order.reserve(host_of_rank.size());
  for (const std::string& h : hosts)
    for (size_t r = 0; r < host_of_rank.size(); ++r)
      if (host_of_rank[r] == h) order.push_back(static_cast<int>(r));
  return order;
}

std::vector<int> ranks_per_host(const std::vector<std::string>& host_of_rank) {
  std::vector<std::string> hosts;
  std::vector<int> counts;
  for (const std::string& h : host_of_rank) {
    const auto at = static_cast<size_t>(std::find(hosts.begin(), hosts.end(), h) - hosts.begin());
    if (at == hosts.size()) {
      hosts.push_back(h);
      counts.push_back(0);
    }
    ++counts[at];
  }
  return counts;
}

std::vector<int> host_ring(const std::vector<int>& order, const std::vector<std::string>& host_of_rank, int rank) {
  std::vector<int> ring;
  for (const int r : order)
    if (host_of_rank[static_cast<size_t>(r)] == host_of_rank[static_cast<size_t>(rank)]) ring.push_back(r);
  return ring;
}

std::vector<int> cross_host_ring(const std::vector<int>& order, const std::vector<std::string>& host_of_rank,
                                 int rank) {
  // `order` lists each host's ranks together, so a rank's local index is its distance from the
  // first rank of its host's stretch.
  std::vector<int> local_index(order.size());
  for (size_t p = 0; p < order.size(); ++p) {
    const bool first =
        p == 0 || host_of_rank[static_cast<size_t>(order[p])] != host_of_rank[static_cast<size_t>(order[p - 1])];
    local_index[static_cast<size_t>(order[p])] = first ? 0 : local_index[static_cast<size_t>(order[p - 1])] + 1;
  }
  std::vector<int> ring;
  for (const int r : order)
    if (local_index[static_cast<size_t>(r)] == local_index[static_cast<size_t>(rank)]) ring.push_back(r);
  return ring;
}

RingNeighbours ring_neighbours(const std::vector<int>& order, const std::vector<std::string>& host_of_rank, int rank,
                               const std::string& transport) {
  const auto n = static_cast<int>(order.size());
  const int position = static_cast<int>(std::find(order.begin(), order.end(), rank) - order.begin());
  RingNeighbours ring;
  ring.rank = rank;
  ring.next = order[static_cast<size_t>((position + 1) % n)];
  ring.prev = order[static_cast<size_t>((position + n - 1) % n)];
  auto link_to = [&](int peer) {
    if (transport != "auto") return transport;
    return host_of_rank[static_cast<size_t>(peer)] == host_of_rank[static_cast<size_t>(rank)] ? std::string("shm")
                                                                                              : std::string("tcp");
  };
  ring.to_next = link_to(ring.next);
  ring.from_prev = link_to(ring.prev);
  return ring;
}

}  // namespace parallel
}  // namespace ringgrad
