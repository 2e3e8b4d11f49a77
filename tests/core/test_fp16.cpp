// tests/core/test_fp16.cpp: DType::f16 and the host conversions of core/base/fp16.h.
//
// The conversions are checked against a reference written another way: every float16 value decoded
// with ldexp, and the nearest one to a float found by comparing with the exact midpoints between
// neighbours (in double, where they are exact). Widening is checked for all 65536 bit patterns;
// narrowing at every boundary float16 has -- each value, each midpoint, a few ulps around them, the
// overflow and underflow thresholds -- and on a sweep through all float32 bit patterns. Where the
// CPU has F16C (x86's own conversion instructions), the sweep is compared with it too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <ringgrad/core/base/fp16.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RINGGRAD_TEST_F16C 1
#endif

using namespace ringgrad;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

bool is_nan16(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// What float16 bits h stand for, from the definition: (-1)^s 2^(e-15) 1.m, or 2^-14 0.m when e = 0.
double decode(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double magnitude = e == 0x1f ? INFINITY : e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000u) ? -magnitude : magnitude;
}

// The float16 nearest to a finite or infinite x, ties to the even bit pattern. Past 65504 the next
// value would be 2^16 (odd), so the midpoint 65520 and up go to infinity, as IEEE 754 says.
uint16_t reference_fp16(float x) {
  static const std::vector<double> finite = [] {  // every non-negative finite float16, by bits = index
    std::vector<double> v;
    for (uint16_t h = 0; h <= 0x7bff; ++h) v.push_back(decode(h));
    return v;
  }();
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65520.0) return sign | 0x7c00;
  const auto hi = static_cast<uint16_t>(std::lower_bound(finite.begin(), finite.end(), a) - finite.begin());
  if (hi == finite.size()) return sign | 0x7bff;  // above 65504, below the midpoint 65520
  if (finite[hi] == a) return sign | hi;
  const auto lo = static_cast<uint16_t>(hi - 1);     // a > 0 here, so hi >= 1
  const double mid = (finite[lo] + finite[hi]) / 2;  // exact: 12 significant bits at most
  const uint16_t nearest = a < mid ? lo : a > mid ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | nearest;
}

// Narrowing checked against the reference (NaNs: a quiet NaN of the same sign).
void check_narrowing(float x) {
  const uint16_t got = float_to_fp16(x);
  if (std::isnan(x)) {
    INFO("NaN bits " << std::hex << bits_of(x) << " -> " << got);
    CHECK(is_nan16(got));
    CHECK((got & 0x0200u) != 0);
    CHECK((got & 0x8000u) == ((bits_of(x) >> 16) & 0x8000u));
    return;
  }
  const uint16_t want = reference_fp16(x);
  if (got != want) {
    INFO("float " << x << " (bits " << std::hex << bits_of(x) << "): got " << got << ", want " << want);
    CHECK(got == want);
  }
}

#ifdef RINGGRAD_TEST_F16C
// The hardware's own: imm 0 rounds to nearest even whatever MXCSR says. Compiled for F16C in these
// two functions only, and called only when the CPU has it, so the tests build and run without -mf16c.
__attribute__((target("f16c"))) uint16_t f16c_narrow(float x) { return static_cast<uint16_t>(_cvtss_sh(x, 0)); }
__attribute__((target("f16c"))) float f16c_widen(uint16_t h) { return _cvtsh_ss(h); }
#endif

}  // namespace

TEST_CASE("dtype: float16 is a 2-byte floating dtype named float16, numbered after bfloat16", "[dtype][fp16]") {
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(std::string(dtype_name(DType::f16)) == "float16");
  CHECK(is_floating(DType::f16));
  // Appended to the enum, so that the dtypes before it keep their numbers.
  CHECK(static_cast<int>(DType::bf16) == 4);
  CHECK(static_cast<int>(DType::f16) == 5);
  Tensor t = empty({2}, DType::f16);
  CHECK(t.dtype() == DType::f16);
  CHECK(t.element_size() == 2);
  CHECK(t.requires_grad_(true).requires_grad());
}

TEST_CASE("dtype: item reads a float16 tensor on the host", "[dtype][fp16]") {
  const Tensor t = empty({3}, DType::f16);
  const uint16_t bits[] = {0x3c00, 0xc500, 0x0001};  // 1, -5, 2^-24
  std::memcpy(t.data(), bits, sizeof bits);
  CHECK(t.select(0, 0).item() == 1.0);
  CHECK(t.select(0, 1).item() == -5.0);
  CHECK(t.select(0, 2).item() == std::ldexp(1.0, -24));
}

TEST_CASE("dtype: all 65536 float16 bit patterns widen exactly and narrow back to themselves", "[dtype][fp16]") {
  int nans = 0;
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = fp16_to_float(h);
    INFO("bits " << std::hex << i);
    if (is_nan16(h)) {
      ++nans;
      REQUIRE(std::isnan(f));
      CHECK((bits_of(f) & 0x00400000u) != 0);  // quiet
      CHECK(std::signbit(f) == ((h & 0x8000u) != 0));
      // Narrowing gives it back, made quiet: the payload travels with the mantissa both ways.
      CHECK(float_to_fp16(f) == (h | 0x0200u));
      continue;
    }
    REQUIRE(static_cast<double>(f) == decode(h));
    REQUIRE(std::signbit(f) == ((h & 0x8000u) != 0));  // -0 stays -0
    REQUIRE(float_to_fp16(f) == h);
  }
  CHECK(nans == 2 * 1023);
}

TEST_CASE("dtype: float_to_fp16 rounds to nearest even at the range's edges", "[dtype][fp16]") {
  const float two_m24 = std::ldexp(1.0f, -24), two_m25 = std::ldexp(1.0f, -25), two_m14 = std::ldexp(1.0f, -14);
  const struct {
    float x;
    uint16_t bits;
  } cases[] = {
      {65504.0f, 0x7bff},                        // the largest finite value
      {std::nextafter(65520.0f, 0.0f), 0x7bff},  // 65519.996: still nearer to 65504
      {65520.0f, 0x7c00},                        // the midpoint to 2^16 (odd): infinity
      {65536.0f, 0x7c00},
      {1e10f, 0x7c00},
      {-65520.0f, 0xfc00},
      {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {two_m24, 0x0001},  // the smallest subnormal
      {two_m25, 0x0000},  // half of it: a tie, to the even zero
      {-two_m25, 0x8000},
      {std::nextafter(two_m25, 1.0f), 0x0001},  // just past the tie
      {std::nextafter(two_m25, 0.0f), 0x0000},
      {3 * two_m25, 0x0002},  // 1.5 units: a tie, to the even 2
      {5 * two_m25, 0x0002},  // 2.5 units: to the even 2
      {std::numeric_limits<float>::denorm_min(), 0x0000},
      {1023 * two_m24, 0x03ff},     // the largest subnormal
      {two_m14 - two_m25, 0x0400},  // 1023.5 units: a tie, up to the smallest normal
      {two_m14, 0x0400},
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},      // a tie between 1 and 1 + 2^-10: even
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02},  // a tie: up to the even one
      {std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f), 0x3c01},
      {2049.0f, 0x6800},  // a tie between 2048 and 2050: even
      {2051.0f, 0x6802},
      {-1.5f, 0xbe00},
  };
  for (const auto& c : cases) {
    INFO("x = " << c.x << ", want bits " << std::hex << c.bits);
    CHECK(float_to_fp16(c.x) == c.bits);
    CHECK(reference_fp16(c.x) == c.bits);  // and the reference agrees, or the sweeps below prove little
  }
  CHECK(is_nan16(float_to_fp16(NAN)));
  CHECK(is_nan16(float_to_fp16(-NAN)));
  CHECK(is_nan16(float_to_fp16(float_of(0x7f800001u))));  // a signalling NaN with the lowest payload bit
  CHECK((float_to_fp16(float_of(0x7f800001u)) & 0x0200u) != 0);
}

TEST_CASE("dtype: float_to_fp16 agrees with the reference around every float16 value and midpoint", "[dtype][fp16]") {
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every non-negative finite float16
    const float v = fp16_to_float(static_cast<uint16_t>(h));
    const float next = h == 0x7bff ? 65536.0f : fp16_to_float(static_cast<uint16_t>(h + 1));
    const float mid = (v + next) / 2;  // exact in float32: 12 significant bits
    for (const float centre : {v, mid}) {
      float below = centre, above = centre;
      for (int k = 0; k < 3; ++k) {
        check_narrowing(below);
        check_narrowing(-below);
        check_narrowing(above);
        check_narrowing(-above);
        below = std::nextafter(below, 0.0f);
        above = std::nextafter(above, INFINITY);
      }
    }
  }
}

TEST_CASE("dtype: float_to_fp16 agrees with the reference on a sweep of all float32 bit patterns", "[dtype][fp16]") {
  // A prime stride visits every exponent and sign with varied low mantissa bits, NaNs included.
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) check_narrowing(float_of(static_cast<uint32_t>(u)));
  check_narrowing(float_of(0xffffffffu));
}

#ifdef RINGGRAD_TEST_F16C
TEST_CASE("dtype: float16 conversions equal the CPU's F16C instructions bit for bit", "[dtype][fp16]") {
  if (!cpu_has_f16c()) {
    WARN("this CPU has no F16C: nothing to compare with");
    return;
  }
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float mine = fp16_to_float(static_cast<uint16_t>(h)), theirs = f16c_widen(static_cast<uint16_t>(h));
    if (bits_of(mine) != bits_of(theirs)) {
      INFO("bits " << std::hex << h);
      CHECK(bits_of(mine) == bits_of(theirs));
    }
  }
  int64_t differ = 0;
  for (uint64_t u = 0; u <= 0xffffffffu; u += 251) {
    const float x = float_of(static_cast<uint32_t>(u));
    if (float_to_fp16(x) != f16c_narrow(x) && differ++ < 10) {
      INFO("float bits " << std::hex << u << ": got " << float_to_fp16(x) << ", F16C says " << f16c_narrow(x));
      CHECK(float_to_fp16(x) == f16c_narrow(x));
    }
  }
  CHECK(differ == 0);
}
#endif

TEST_CASE("dtype: the array conversions equal the element ones bit for bit, tails included", "[dtype][fp16]") {
  // Every float16 pattern, then 5 more: the tail past the last group of 8 goes element by element.
  std::vector<uint16_t> halves(0x10000 + 5);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i * 40503u);  // odd: every pattern
  std::vector<float> wide(halves.size());
  fp16_to_floats(halves.data(), wide.data(), static_cast<int64_t>(halves.size()));
  int64_t differ = 0;
  for (size_t i = 0; i < halves.size(); ++i) differ += bits_of(wide[i]) != bits_of(fp16_to_float(halves[i]));
  CHECK(differ == 0);

  // Floats across every exponent and sign, NaNs and the rounding edges among them, in odd lengths.
  std::vector<float> floats;
  for (uint64_t u = 0; u <= 0xffffffffu; u += 65521) floats.push_back(float_of(static_cast<uint32_t>(u)));
  for (float edge : {65504.0f, 65519.99f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, -0.0f, INFINITY, -INFINITY, NAN})
    floats.push_back(edge);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{9}, floats.size()}) {
    std::vector<uint16_t> narrow(n);
    floats_to_fp16(floats.data(), narrow.data(), static_cast<int64_t>(n));
    differ = 0;
    for (size_t i = 0; i < n; ++i) differ += narrow[i] != float_to_fp16(floats[i]);
    INFO(n << " floats");
    CHECK(differ == 0);
  }
}
