// parallel/ring/hierarchical.cpp: choosing the all-reduce, and the three phases of the hierarchical one.
#include "parallel/ring/hierarchical.h"

#include <algorithm>
#include <cstdlib>

#include <ringgrad/core/base/error.h>
#include "parallel/ring/ring_order.h"

namespace ringgrad {
namespace parallel {
namespace {

bool known_algorithm(const std::string& name) { return name == "auto" || name == "flat" || name == "hierarchical"; }

// "1 host with 4 ranks", "3 hosts with 1 rank each", "hosts with 2, 2 and 1 ranks".
std::string describe_hosts(const std::vector<int>& counts) {
  auto ranks = [](int n) { return detail::str(n, n == 1 ? " rank" : " ranks"); };
  if (counts.size() == 1) return detail::str("1 host with ", ranks(counts[0]));
  if (std::all_of(counts.begin(), counts.end(), [&](int n) { return n == counts[0]; }))
    return detail::str(counts.size(), " hosts with ", ranks(counts[0]), " each");
  std::string out = "hosts with ";
  for (size_t h = 0; h < counts.size(); ++h)
    out += detail::str(h == 0 ? "" : h + 1 == counts.size() ? " and " : ", ", counts[h]);
  return out + " ranks";
}

}  // namespace

std::string requested_algorithm(const std::string& option) {
  if (!option.empty()) {
    RINGGRAD_CHECK(known_algorithm(option), "ring: expected algorithm \"auto\", \"flat\" or \"hierarchical\", got \"",
                   option, "\"");
    return option;
  }
  const char* env = std::getenv("RINGGRAD_RING_ALGORITHM");
  if (env == nullptr || *env == '\0') return "auto";
  RINGGRAD_CHECK(known_algorithm(env),
                 "ring: expected RINGGRAD_RING_ALGORITHM to be \"auto\", \"flat\" or \"hierarchical\", got \"", env,
                 "\"");
  return env;
}

bool use_hierarchical(const std::string& requested, const std::vector<std::string>& host_of_rank) {
  if (requested == "flat") return false;
  const std::vector<int> counts = ranks_per_host(host_of_rank);
  const bool possible = counts.size() >= 2 && counts[0] >= 2 &&
                        std::all_of(counts.begin(), counts.end(), [&](int n) { return n == counts[0]; });
  RINGGRAD_CHECK(possible || requested != "hierarchical",
                 "ring: algorithm \"hierarchical\" needs 2 or more hosts with the same number (>= 2) of ranks each, "
                 "got ",
                 describe_hosts(counts), "; use \"auto\" (hierarchical where it can be, else flat) or \"flat\"");
  return possible;
}

void hierarchical_all_reduce(const RingStep& local, const RingStep& across, void* data, int64_t count, DType dtype,
                             ReduceOp op) {
  const int64_t element_size = dtype_size(dtype);
  // The three phases share the collective's number in their tags: the receiver checks each message's
  // tag on its own link, the ring across hosts is another link than the host's, and on the host's the
  // reduce-scatter's steps (0..P-2) and the all-gather's (P..2P-2) never meet.
  // Shard j belongs to the rank at place j of each host; chunks are in the host ring's order.
  const std::vector<Chunk> shards = split_chunks(data, count, element_size, local.size);
  ring_reduce_scatter(local, shards, dtype, op);
  const Chunk& own = shards[static_cast<size_t>(local.position)];
  // An average stays a sum across the hosts too (ring_all_reduce would divide by H alone), and is
  // divided once, by the whole world, by every rank that holds this summed shard.
  ring_all_reduce(across, own.data, own.count, dtype, op == ReduceOp::Avg ? ReduceOp::Sum : op);
  if (op == ReduceOp::Avg) divide_by(own.data, own.count, dtype, local.size * across.size);
  ring_all_gather(local, shards, element_size);
}

}  // namespace parallel
}  // namespace ringgrad
