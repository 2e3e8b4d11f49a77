/// @file
/// core/base/fp16.h: float16 (IEEE 754 binary16, "half") on the host, bit by bit.
///
/// float16 is a sign, a 5-bit exponent (bias 15) and 10 bits of mantissa: 3 more bits of precision
/// than bfloat16's 7, but a far narrower range. The largest finite value is 65504; the smallest
/// normal one is 2^-14 (about 6.1e-5), below which subnormals go down to 2^-24 (about 6e-8) and
/// then zero. That range is why it matters: gradients that bfloat16 (float32's range) carries
/// unharmed can underflow to subnormals or zero, or overflow to infinity, in float16 -- PyTorch's
/// fp16_compress_hook has the same caveat.
///
/// Widening is exact. Narrowing rounds to nearest, ties to even, as CUDA's __float2half_rn, NCCL
/// and x86's F16C do: magnitudes from 65520 up (the midpoint between 65504 and 2^16) become an
/// infinity, values at or below 2^-25 (half the smallest subnormal) become a zero of their sign,
/// and a NaN stays a NaN (a quiet one, keeping the top of its payload). The CPU backend holds
/// float16 tensors but computes nothing in it; code that moves them on the host (the ring's
/// reductions, DDP's fp16 compression hook) converts with these.
#pragma once

#include <cstdint>
#include <cstring>

namespace ringgrad {

/// A float16's bits, widened to the float32 it stands for (exactly; a NaN comes back quiet).
inline float fp16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  uint32_t wide = sign;
  if (exponent == 0x1f) {
    // Infinity, or a NaN: its payload moves up with the mantissa, and the quiet bit is set.
    wide |= 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent != 0) {
    wide |= ((exponent + 127 - 15) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa != 0) {
    // A subnormal, mantissa * 2^-24, is a normal float32: its top set bit p becomes the implicit one.
    int p = 9;
    while ((mantissa & (1u << p)) == 0) --p;
    wide |= (static_cast<uint32_t>(p + 127 - 24) << 23) | ((mantissa << (23 - p)) & 0x007fffffu);
  }
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

/// The float16 nearest to f (ties to even), as bits.
inline uint16_t float_to_fp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));  // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520, and infinity
  if (magnitude >= 0x38800000u) {
    // >= 2^-14, a normal float16: rebias the exponent (127 -> 15), then drop 13 mantissa bits. Adding
    // 0xfff plus the lowest kept bit rounds the dropped part to nearest, ties to even; a carry out of
    // the mantissa bumps the exponent, which is right (65520 and up were taken above).
    uint32_t v = magnitude - ((127u - 15u) << 23);
    v += 0xfffu + ((v >> 13) & 1u);
    return static_cast<uint16_t>(sign | (v >> 13));
  }
  if (magnitude < 0x33000000u) return sign;  // below 2^-25: nearer to zero than to 2^-24
  // A subnormal float16 counts units of 2^-24: shift the 24-bit significand right by what is left of
  // the exponent and round the dropped bits to nearest, ties to even. A round up from the largest
  // subnormal gives 0x400, the smallest normal -- its bits, too.
  const uint32_t significand = (magnitude & 0x007fffffu) | 0x00800000u;
  const uint32_t shift = 126u - (magnitude >> 23);  // 14 .. 24
  uint32_t units = significand >> shift;
  const uint32_t dropped = significand & ((1u << shift) - 1u), midpoint = 1u << (shift - 1u);
  if (dropped > midpoint || (dropped == midpoint && (units & 1u) != 0)) ++units;
  return static_cast<uint16_t>(sign | units);
}

/// n floats to float16 bits, and n float16s to floats: the same results as the functions above, bit
/// for bit, but with x86's F16C instructions (8 at a time) on a CPU that has them, checked at run
/// time -- the library's default target (x86-64-v2) does not assume them, and element by element
/// the conversion is what a compression hook spends its time on.
void floats_to_fp16(const float* from, uint16_t* to, int64_t n);
/// Whether this CPU (and its OS) can run F16C: what the two functions around this one use.
bool cpu_has_f16c();
void fp16_to_floats(const uint16_t* from, float* to, int64_t n);

}  // namespace ringgrad
