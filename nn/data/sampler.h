/// @file
/// nn/data/sampler.h: Sampler, which tells a DataLoader which samples each epoch visits, and
/// shuffled_indices, the one shuffle behind every order in nn/data.
///
/// A sampler's indices(e) is a pure function of the epoch e, like the DataLoader's own order (see the
/// top of dataloader.h): no state is carried from one epoch to the next, so a run resumed from a
/// checkpoint at epoch e sees exactly the samples the original run saw. DistributedSampler
/// (distributed_sampler.h) is the one ringgrad ships; anything else -- a weighted or class-balanced
/// order -- implements the same two functions.
#pragma once

#include <cstdint>
#include <vector>

namespace ringgrad {
namespace nn {
namespace data {

/// The samples an epoch visits, in order. A DataLoader with a sampler batches indices(e) for epoch e:
/// batch k holds the samples indices(e)[k*B .. k*B + B). An index may appear more than once (padding)
/// or not at all (another rank's share). A loader calls these from the thread that uses it, never from
/// its prefetch thread.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// Samples per epoch: indices(e).size() for every e.
  virtual int64_t size() const = 0;
  /// The dataset indices of epoch `epoch` (>= 0), each in [0, N).
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

/// A permutation of 0 .. n-1, 0 <= n < 2^32: Fisher-Yates driven by Philox4x32-10 keyed by `seed`,
/// with `epoch` in the counter's upper half, so each epoch draws from its own stream. A pure function
/// of (n, seed, epoch), the same on every platform, compiler and run -- unlike std::shuffle, whose
/// algorithm the standard leaves to the implementation. The DataLoader's shuffle and
/// DistributedSampler's both call it, so the two agree: a loader with seed s and a one-replica
/// DistributedSampler with seed s visit the same order.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t epoch);

}  // namespace data
}  // namespace nn
}  // namespace ringgrad
