/// @file
/// core/base/bf16.h: bfloat16 on the host, bit by bit.
///
/// bfloat16 is the top half of a float32: the same sign and 8-bit exponent (so the same range), 7
/// bits of mantissa instead of 23. Widening is a shift; narrowing rounds to nearest, ties to even,
/// as CUDA's __float2bfloat16 and NCCL do, and keeps a NaN a NaN (a quiet one). The CPU backend holds
/// bfloat16 tensors but computes nothing in it; code that moves them on the host (the ring's
/// reductions, DDP's bf16 compression hook) converts with these.
#pragma once

#include <cstdint>
#include <cstring>

namespace ringgrad {

/// A bfloat16's bits, widened to the float32 it stands for (exactly).
inline float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

/// The bfloat16 nearest to f (ties to even), as bits.
inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace ringgrad
