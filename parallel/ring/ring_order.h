// parallel/ring/ring_order.h: where each rank sits on the ring.
//
// A ring of N ranks on H hosts crosses between hosts at least H times, and each crossing is a slow
// link (a NIC) where the others are fast ones (shared memory). Ranks numbered host by host -- as
// ringrun, torchrun and Slurm's block distribution number them -- already cross exactly H times in
// rank order. Others need not: Slurm's cyclic distribution puts rank r on host r % H, and a ring in
// rank order would cross between hosts at every link, N times. So the ring goes host by host
// instead: the hosts in the order of their lowest rank, and within a host its ranks in rank order.
// Every all-reduce result is the same in any order around the ring; the collectives whose chunks
// belong to ranks (all-gather, reduce-scatter, broadcast's root) map ranks to positions.
#pragma once

#include <string>
#include <vector>

#include "parallel/ring/link.h"

namespace ringgrad {
namespace parallel {

// The ranks in ring order, given each rank's host (any string that is equal for ranks on one host).
std::vector<int> ring_order(const std::vector<std::string>& host_of_rank);

// How many ranks each host has, the hosts in ring order.
std::vector<int> ranks_per_host(const std::vector<std::string>& host_of_rank);

// The two smaller rings of a hierarchical all-reduce (hierarchical.h), as sub-sequences of `order`:
// the ranks of `rank`'s host, and the ranks that sit at `rank`'s place within their host (its local
// index: 0 for a host's first rank on the ring), one per host. The second needs every host to have a
// rank at that place.
std::vector<int> host_ring(const std::vector<int>& order, const std::vector<std::string>& host_of_rank, int rank);
std::vector<int> cross_host_ring(const std::vector<int>& order, const std::vector<std::string>& host_of_rank, int rank);

// `rank`'s neighbours on the ring `order` (the whole job's, or one of the two above), and the transport of each link:
// `transport` when it is "shm" or "tcp", else ("auto") shared memory to a neighbour on the same host and TCP to one on
// another.
RingNeighbours ring_neighbours(const std::vector<int>& order, const std::vector<std::string>& host_of_rank, int rank,
                               const std::string& transport);

}  // namespace parallel
}  // namespace ringgrad
