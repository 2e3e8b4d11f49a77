// core/generator.h: a seedable, counter-based random number generator (Philox 4x32-10).
//
// A Generator is a (seed, offset) pair. Drawing n numbers hands out counters offset .. offset+n-1 and
// advances the offset, so element i of a random tensor depends only on (seed, offset + i): the same
// values come out on any backend and any number of threads, and saving (seed, offset) saves the state.
#pragma once

#include <cstdint>

namespace ringgrad {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  // All of these are thread-safe: DataParallel replicas draw dropout masks from the default
  // generator on their devices' worker threads while the user's thread may reseed it.
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  uint64_t offset() const;
  void set_state(uint64_t seed, uint64_t offset);
  // Reserves n counters and returns the first.
  uint64_t reserve(uint64_t n);

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator used when no generator or seed is given.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace ringgrad
