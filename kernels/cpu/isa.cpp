// kernels/cpu/isa.cpp: detects the CPU's vector level once (see isa.h).
#include "kernels/cpu/isa.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include <ringgrad/core/base/error.h>
#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {
namespace cpu {
namespace {

Isa detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // __builtin_cpu_supports also checks that the operating system saves the wider registers (XCR0),
  // so a feature the CPU has but the kernel does not enable reads as absent.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
    return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
#endif
  return Isa::baseline;
}

Isa parse_override(const char* text, Isa supported) {
  Isa wanted = Isa::baseline;
  if (std::strcmp(text, "baseline") == 0) {
    wanted = Isa::baseline;
  } else if (std::strcmp(text, "avx2") == 0) {
    wanted = Isa::avx2;
  } else if (std::strcmp(text, "avx512") == 0) {
    wanted = Isa::avx512;
  } else {
    throw Error(detail::str("RINGGRAD_CPU_ISA: expected baseline, avx2 or avx512, got '", text, "'"));
  }
  RINGGRAD_CHECK(static_cast<int>(wanted) <= static_cast<int>(supported), "RINGGRAD_CPU_ISA: asked for ",
                 isa_name(wanted), ", but this CPU supports only up to ", isa_name(supported));
  return wanted;
}

Isa choose() {
  const Isa supported = cpu_isa_supported();
  const char* text = std::getenv("RINGGRAD_CPU_ISA");
  if (text == nullptr || *text == '\0') return supported;
  return parse_override(text, supported);
}

}  // namespace

Isa cpu_isa_supported() {
  static const Isa supported = detect();
  return supported;
}

Isa cpu_isa() {
  static const Isa chosen = choose();
  return chosen;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    case Isa::baseline: break;
  }
  return "baseline";
}

}  // namespace cpu

std::string cpu_kernels_chosen() {
  const cpu::Isa chosen = cpu::cpu_isa(), supported = cpu::cpu_isa_supported();
  std::string text = std::string(cpu::isa_name(chosen)) + " (this CPU: " + cpu::isa_name(supported);
  if (chosen != supported) text += ", lowered by RINGGRAD_CPU_ISA";
  return text + ")";
}

}  // namespace kernels
}  // namespace ringgrad
