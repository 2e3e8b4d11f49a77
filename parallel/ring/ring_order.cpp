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
