// cuda_emu/bf16.h: __nv_bfloat16 and its conversions, bit for bit as CUDA rounds them.
//
// bfloat16 is the top half of a float32: sign, 8 exponent bits, 7 mantissa bits. Conversions to it
// round to nearest, ties to even (the _rn of the names); a NaN becomes the canonical 0x7fff.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t x;
};
typedef __nv_bfloat16 nv_bfloat16;

inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t bits = static_cast<uint32_t>(b.x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (std::isnan(f)) return __nv_bfloat16{0x7fff};
  // Adding 0x7fff plus the lowest kept bit rounds the dropped half to nearest, ties to even; a
  // carry out of the mantissa bumps the exponent, and out of the largest finite value gives inf.
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return __nv_bfloat16{static_cast<uint16_t>(bits >> 16)};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }

// Straight from double, rounded once (double -> float -> bf16 could round twice).
inline __nv_bfloat16 __double2bfloat16(double d) {
  if (std::isnan(d)) return __nv_bfloat16{0x7fff};
  if (d == 0.0 || std::isinf(d)) return __float2bfloat16_rn(static_cast<float>(d));
  // bf16 keeps 8 significant bits: scale so that they are the integer part, round, scale back.
  // Below 2^-126 the spacing stays 2^-133 (subnormals). Both scalings are exact.
  int exponent = 0;
  std::frexp(d, &exponent);  // |d| = m 2^exponent, 0.5 <= m < 1
  const int quantum = exponent - 8 > -133 ? exponent - 8 : -133;
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(d, -quantum)), quantum);
  if (std::fabs(rounded) >= 0x1p128) return __nv_bfloat16{static_cast<uint16_t>(d < 0 ? 0xff80 : 0x7f80)};
  return __float2bfloat16_rn(static_cast<float>(rounded));  // exact: rounded has <= 8 significant bits
}
