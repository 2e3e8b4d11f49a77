// core/base/fp16.cpp: float16 conversions of whole arrays, with F16C where the CPU has it.
//
// Budget: a conversion reads 4 (or 2) bytes and writes 2 (or 4) per element and does no arithmetic
// to speak of, so it should run at memory speed. The portable functions in fp16.h branch per element
// (about 1-2 ns each); F16C's vcvtps2ph / vcvtph2ps convert 8 per instruction and round exactly as
// they do (nearest, ties to even; NaNs quiet, keeping the top of the payload).
#include <ringgrad/core/base/fp16.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define RINGGRAD_HAVE_F16C_PATH 1
#endif

namespace ringgrad {
namespace {

#ifdef RINGGRAD_HAVE_F16C_PATH
__attribute__((target("avx,f16c"))) int64_t floats_to_fp16_f16c(const float* from, uint16_t* to, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(from + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i), h);
  }
  return i;  // the caller converts the rest
}

__attribute__((target("avx,f16c"))) int64_t fp16_to_floats_f16c(const uint16_t* from, float* to, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(to + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i))));
  return i;
}
#endif

}  // namespace

bool cpu_has_f16c() {
#ifdef RINGGRAD_HAVE_F16C_PATH
  // CPUID leaf 1 says whether the CPU has F16C and AVX; XCR0 whether the OS saves the YMM registers
  // those instructions use. (Asked directly: clang 14's __builtin_cpu_supports knows no "f16c".)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    const unsigned needed = bit_F16C | bit_AVX | bit_OSXSAVE;
    if ((ecx & needed) != needed) return false;
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    return (xcr0_low & 0x6u) == 0x6u;  // SSE and AVX state
  }();
  return has;
#else
  return false;
#endif
}

void floats_to_fp16(const float* from, uint16_t* to, int64_t n) {
  int64_t i = 0;
#ifdef RINGGRAD_HAVE_F16C_PATH
  if (cpu_has_f16c()) i = floats_to_fp16_f16c(from, to, n);
#endif
  for (; i < n; ++i) to[i] = float_to_fp16(from[i]);
}

void fp16_to_floats(const uint16_t* from, float* to, int64_t n) {
  int64_t i = 0;
#ifdef RINGGRAD_HAVE_F16C_PATH
  if (cpu_has_f16c()) i = fp16_to_floats_f16c(from, to, n);
#endif
  for (; i < n; ++i) to[i] = fp16_to_float(from[i]);
}

}  // namespace ringgrad
