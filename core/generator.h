/// @file
/// core/generator.h: a seedable, counter-based random number generator (Philox 4x32-10).
///
/// A Generator is a (seed, offset) pair. Drawing n numbers hands out counters offset .. offset+n-1 and
/// advances the offset, so element i of a random tensor depends only on (seed, offset + i): the same
/// values come out on any backend and any number of threads, and saving (seed, offset) saves the state.
#pragma once

#include <cstdint>

namespace ringgrad {

/// A counter-based random number generator: a seed and an offset into Philox's stream. Each draw of
/// n values reserves n counters, so the values do not depend on how the work is split.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}  ///< at offset 0
  /// All of these are thread-safe: DataParallel replicas draw dropout masks from the default
  /// generator on their devices' worker threads while the user's thread may reseed it.
  /// Sets the seed and rewinds the offset to 0.
  void manual_seed(uint64_t seed);
  uint64_t seed() const;    ///< the current seed
  uint64_t offset() const;  ///< the next counter reserve() hands out
  /// Restores a state read with seed() and offset() (what a checkpoint saves).
  void set_state(uint64_t seed, uint64_t offset);
  /// Reserves n counters and returns the first.
  uint64_t reserve(uint64_t n);

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// The process-wide generator used when no generator or seed is given.
Generator& default_generator();
void manual_seed(uint64_t seed);  ///< default_generator().manual_seed(seed), as torch.manual_seed

}  // namespace ringgrad
