// parallel/ring/hierarchical.h: the two-level all-reduce for jobs across hosts, and when to use it.
//
// On H hosts of P ranks (N = H·P), the flat ring crosses between hosts H times, and every step sends
// 1/N of the buffer over each crossing: each host's network link carries 2(N-1)/N of the buffer each
// way, nearly twice the buffer. The hierarchical all-reduce takes three rings instead:
//
//   1. reduce-scatter inside each host (P ranks, shared memory): the buffer is cut into P shards,
//      and the rank at place j of its host owns shard j summed over its host;
//   2. all-reduce of each shard across the hosts: P rings at once, ring j joining the H ranks at
//      place j (TCP), each all-reducing its 1/P of the buffer;
//   3. all-gather inside each host: every rank gets every shard.
//
// Each host's link now carries P rings of 2(H-1)/H · S/P bytes: 2(H-1)/H of the buffer, once per
// crossing (1.0 of it at H = 2, against 1.5 for the flat ring at 2 x 2 and 1.75 at 2 x 4). The shared
// memory inside a host moves 2(P-1)/P of it, at memory speed.
//
// Determinism: each shard is summed in a fixed order (around its host, then around the hosts), the
// ranks that hold a summed shard hold bitwise the same one, and an average divides it by N once, the
// same way on each of them -- so every rank ends with bitwise the same result, run after run. The
// order differs from the flat ring's, so sums of fractions may round differently from it (sums that
// are exact, such as small integers, do not).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/ring/ring_collectives.h"

namespace ringgrad {
namespace parallel {

// The algorithm asked for: `option` (RingOptions::algorithm) when set, else RINGGRAD_RING_ALGORITHM
// when set, else "auto". Throws naming the source and the valid values ("auto", "flat",
// "hierarchical") for any other value.
std::string requested_algorithm(const std::string& option);

// Whether all_reduce goes hierarchical, for the job whose ranks are on `host_of_rank`: "flat" never,
// "auto" when the job spans 2 or more hosts with the same number (>= 2) of ranks each, and
// "hierarchical" then too -- otherwise it throws, saying what the hosts hold.
bool use_hierarchical(const std::string& requested, const std::vector<std::string>& host_of_rank);

// In place, as ring_all_reduce: `local` is the ring of this host's ranks (its position is this rank's
// place within the host), `across` the ring of the ranks at that place on every host.
void hierarchical_all_reduce(const RingStep& local, const RingStep& across, void* data, int64_t count, DType dtype,
                             ReduceOp op);

}  // namespace parallel
}  // namespace ringgrad
