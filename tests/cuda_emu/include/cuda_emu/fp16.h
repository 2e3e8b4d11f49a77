// cuda_emu/fp16.h: __half and its conversions, bit for bit as CUDA rounds them.
//
// float16 (IEEE binary16) is a sign, 5 exponent bits (bias 15) and 10 mantissa bits: normal values
// from 2^-14 to 65504, subnormals down to 2^-24. Conversions to it round to nearest, ties to even
// (the _rn of the names): 65520 and up become an infinity, 2^-25 and below a zero; a NaN becomes the
// canonical 0x7fff. Written apart from ringgrad's core/base/fp16.h, as CUDA's own are, so that the
// tests comparing the two compare two implementations.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

struct __half {
  uint16_t x;
};
typedef __half half;

// Exact; a NaN widens to the canonical 0x7fffffff, as CUDA's does.
inline float __half2float(__half h) {
  const uint32_t sign = static_cast<uint32_t>(h.x >> 15) << 31;
  const int exponent = (h.x >> 10) & 0x1f;
  const int mantissa = h.x & 0x3ff;
  float magnitude;
  if (exponent == 0x1f && mantissa != 0) {
    const uint32_t nan = 0x7fffffffu;
    std::memcpy(&magnitude, &nan, sizeof magnitude);
    return magnitude;
  }
  if (exponent == 0x1f)
    magnitude = INFINITY;
  else if (exponent == 0)
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal (or zero): exact
  else
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  uint32_t bits;
  std::memcpy(&bits, &magnitude, sizeof bits);
  bits |= sign;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Straight from double, rounded once: float16 keeps 11 significant bits, so scale them to the
// integer part, round, scale back. Below 2^-14 the spacing stays 2^-24 (subnormals). Both scalings
// are exact; a rounded magnitude of 2^16 or more is past 65504 and becomes an infinity.
inline __half __double2half(double d) {
  if (std::isnan(d)) return __half{0x7fff};
  const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  if (d == 0.0) return __half{sign};
  if (std::isinf(d)) return __half{static_cast<uint16_t>(sign | 0x7c00)};
  int exponent = 0;
  std::frexp(d, &exponent);  // |d| = m 2^exponent, 0.5 <= m < 1
  const int quantum = exponent - 11 > -24 ? exponent - 11 : -24;
  const double rounded = std::fabs(std::ldexp(std::nearbyint(std::ldexp(d, -quantum)), quantum));
  if (rounded >= 0x1p16) return __half{static_cast<uint16_t>(sign | 0x7c00)};
  if (rounded == 0.0) return __half{sign};
  if (rounded < 0x1p-14) return __half{static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(rounded, 24)))};
  int e = 0;
  const double m = std::frexp(rounded, &e);  // rounded = m 2^e: the float16 exponent is e - 1 + 15
  const auto mantissa = static_cast<uint16_t>(std::ldexp(m, 11)) & 0x3ff;  // the 11 bits, less the implicit one
  return __half{static_cast<uint16_t>(sign | ((e + 14) << 10) | mantissa)};
}

// A float converts exactly to double, so rounding from there is the one rounding CUDA does.
inline __half __float2half_rn(float f) { return __double2half(static_cast<double>(f)); }
inline __half __float2half(float f) { return __float2half_rn(f); }
