// nn/data/sampler.cpp: shuffled_indices, the Philox-keyed Fisher-Yates shuffle of nn/data.
#include <ringgrad/nn/data/sampler.h>

#include <numeric>
#include <utility>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/base/philox.h>

namespace ringgrad {
namespace nn {
namespace data {
namespace {

// 32-bit words from Philox4x32-10 under key `seed`: block i of epoch e is Philox(counter = (i, e)).
// The epoch sits in the counter's upper 64 bits, so epochs draw from disjoint streams.
class EpochStream {
 public:
  EpochStream(uint64_t seed, uint64_t epoch) : seed_(seed), epoch_(epoch) {}
  uint32_t next_u32() {
    if (used_ == 4) {
      const philox::Block counter{{static_cast<uint32_t>(block_), static_cast<uint32_t>(block_ >> 32),
                                   static_cast<uint32_t>(epoch_), static_cast<uint32_t>(epoch_ >> 32)}};
      words_ = philox::philox4x32_10(counter, static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32));
      ++block_;
      used_ = 0;
    }
    return words_.w[used_++];
  }

 private:
  uint64_t seed_, epoch_;
  uint64_t block_ = 0;
  philox::Block words_{};
  int used_ = 4;
};

// A uniform integer in [0, range), 1 <= range < 2^32, without bias: Lemire's multiply-shift, which
// rejects the few 32-bit draws that would make some results one draw more likely than others
// ("Fast Random Integer Generation in an Interval", ACM TOMACS 2019).
uint32_t uniform_below(EpochStream& stream, uint32_t range) {
  uint64_t m = static_cast<uint64_t>(stream.next_u32()) * range;
  if (static_cast<uint32_t>(m) < range) {
    const uint32_t threshold = (0u - range) % range;  // 2^32 mod range
    while (static_cast<uint32_t>(m) < threshold) m = static_cast<uint64_t>(stream.next_u32()) * range;
  }
  return static_cast<uint32_t>(m >> 32);
}

}  // namespace

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t epoch) {
  RINGGRAD_CHECK(n >= 0 && n <= int64_t{UINT32_MAX}, "shuffled_indices: expected 0 <= n < 2^32, got ", n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Fisher-Yates: position i takes a uniformly chosen element of those not yet placed.
  EpochStream stream(seed, epoch);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint32_t j = uniform_below(stream, static_cast<uint32_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[j]);
  }
  return order;
}

}  // namespace data
}  // namespace nn
}  // namespace ringgrad
