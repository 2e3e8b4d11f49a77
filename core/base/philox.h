/// @file
/// core/base/philox.h: Philox4x32-10, the counter-based random number generator behind every random
/// tensor, and the uniform and normal draws built on it. Header-only, for host and CUDA device code.
///
/// A counter-based generator is a keyed hash: block = Philox(counter, key). There is no state to
/// advance, so element i of a draw is computed from (seed, offset + i) alone -- any thread, on any
/// backend, can produce any element, and splitting a draw in two gives the same numbers as one draw.
/// Reference: Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3" (SC'11).
///
/// One element uses one whole 128-bit block: 2 x 32 bits for a float normal, 4 x 32 bits for a double
/// normal. That wastes bits for floats, but keeps "element i <- counter offset + i" true for every
/// kind and dtype. Cost: 10 rounds of two 32x32->64 multiplies, 7-10 ns per element on one CPU core
/// (a normal adds a log and a cosine); compute is what GPUs have in excess, so there a random kernel
/// stays memory-bound.
#pragma once

// The C functions (logf, cosf, ...) in the global namespace are what both host and device code
// call; <cmath> does not promise them there.
#include <math.h>  // NOLINT(modernize-deprecated-headers): see above

#include <cstdint>

// Marks functions compiled for both the CPU and the GPU; other headers may define it the same way.
#ifndef RINGGRAD_HOST_DEVICE
#if defined(__CUDACC__)
#define RINGGRAD_HOST_DEVICE __host__ __device__
#else
#define RINGGRAD_HOST_DEVICE
#endif
#endif

/// @namespace ringgrad::philox
/// The Philox4x32-10 counter-based generator and the uniform and normal draws made from it, shared
/// by the CPU and CUDA kernels.

namespace ringgrad {
namespace philox {

/// A 128-bit counter or output block as four 32-bit words, word 0 least significant.
struct Block {
  uint32_t w[4];  ///< the words, w[0] least significant
};

///@{
/// The constants of Philox4x32: multipliers chosen by the authors for good avalanche, and the Weyl
/// sequence increments (golden ratio and sqrt(3) - 1, as 32-bit fractions) that vary the round keys.
constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kKeyStep0 = 0x9E3779B9u;
constexpr uint32_t kKeyStep1 = 0xBB67AE85u;
///@}
constexpr int kRounds = 10;  ///< Philox4x32-10: ten rounds, the variant Random123 recommends

/// One Philox round: two 32x32->64 multiplies, whose high halves are mixed with the key and the
/// other words, and a word permutation.
RINGGRAD_HOST_DEVICE inline Block philox_round(Block c, uint32_t key0, uint32_t key1) {
  const uint64_t p0 = static_cast<uint64_t>(kMultiplier0) * c.w[0];
  const uint64_t p1 = static_cast<uint64_t>(kMultiplier1) * c.w[2];
  const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return Block{{hi1 ^ c.w[1] ^ key0, lo1, hi0 ^ c.w[3] ^ key1, lo0}};
}

/// Philox4x32-10 on a full 128-bit counter and 64-bit key; matches the Random123 known answers.
RINGGRAD_HOST_DEVICE inline Block philox4x32_10(Block counter, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < kRounds; ++round) {
    counter = philox_round(counter, key0, key1);
    key0 += kKeyStep0;
    key1 += kKeyStep1;
  }
  return counter;
}

/// The block for element `counter` (= offset + i) of a draw under `seed`.
RINGGRAD_HOST_DEVICE inline Block philox_block(uint64_t seed, uint64_t counter) {
  const Block c{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u}};
  return philox4x32_10(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

///@{
/// Uniform in [0, 1) from the top 24 (float) or 53 (double) random bits: every value is a multiple
/// of 2^-24 or 2^-53, so each is exact and 1.0 can never come out.
RINGGRAD_HOST_DEVICE inline float to_unit_float(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);  // 2^-24
}
RINGGRAD_HOST_DEVICE inline double to_unit_double(uint32_t hi, uint32_t lo) {
  const uint64_t bits53 = (static_cast<uint64_t>(hi) << 21) | (lo >> 11);
  return static_cast<double>(bits53) * (1.0 / 9007199254740992.0);  // 2^-53
}
///@}

constexpr double kTwoPi = 6.283185307179586476925286766559;  ///< 2 pi, for Box-Muller

///@{
/// The draws, one template per distribution so typed kernels can write uniform<T>(seed, counter).
template <typename T>
RINGGRAD_HOST_DEVICE T uniform(uint64_t seed, uint64_t counter);
template <typename T>
RINGGRAD_HOST_DEVICE T normal(uint64_t seed, uint64_t counter);
///@}

///@{
/// Uniform in [0, 1) from the block of `counter` under `seed`.
template <>
RINGGRAD_HOST_DEVICE inline float uniform<float>(uint64_t seed, uint64_t counter) {
  return to_unit_float(philox_block(seed, counter).w[0]);
}
template <>
RINGGRAD_HOST_DEVICE inline double uniform<double>(uint64_t seed, uint64_t counter) {
  const Block b = philox_block(seed, counter);
  return to_unit_double(b.w[0], b.w[1]);
}
///@}

///@{
/// Box-Muller: with u1, u2 uniform, sqrt(-2 ln u1) cos(2 pi u2) is standard normal. u1 is taken as
/// 1 - uniform, in (0, 1], so the log is always finite. (The sine half of the pair is dropped: using
/// it would tie two elements to one counter.)
template <>
RINGGRAD_HOST_DEVICE inline float normal<float>(uint64_t seed, uint64_t counter) {
  const Block b = philox_block(seed, counter);
  const float u1 = 1.0f - to_unit_float(b.w[0]);
  const float u2 = to_unit_float(b.w[1]);
  return ::sqrtf(-2.0f * ::logf(u1)) * ::cosf(static_cast<float>(kTwoPi) * u2);
}
template <>
RINGGRAD_HOST_DEVICE inline double normal<double>(uint64_t seed, uint64_t counter) {
  const Block b = philox_block(seed, counter);
  const double u1 = 1.0 - to_unit_double(b.w[0], b.w[1]);
  const double u2 = to_unit_double(b.w[2], b.w[3]);
  // ::, not bare: a bare `log` would find ringgrad::log(Tensor) first wherever <ringgrad/core/ops.h>
  // was included before this header, and look no further.
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(kTwoPi * u2);
}
///@}

}  // namespace philox
}  // namespace ringgrad
