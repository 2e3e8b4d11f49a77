// kernels/cpu/isa.h: which x86-64 vector instructions the hot CPU kernels use, chosen at run time.
//
// The library is compiled for a portable level (x86-64-v2: SSE4.2, no AVX, no FMA) so that one
// build runs on every machine it is copied to. A kernel that needs wider vectors is compiled a
// second (and third) time, in its own file whose name ends in _avx2.cpp or _avx512.cpp: CMake gives
// those files -march=x86-64-v3 (AVX2 + FMA) or -march=x86-64-v4 (AVX-512 F/BW/DQ/VL), and nothing
// outside them ever runs their code unless cpu_isa() says the CPU has it. This is what OpenBLAS and
// PyTorch do ("dynamic arch"); a -march=native build gains nothing more from it.
//
// A file compiled for a wider level must not define anything another file could also define: an
// inline function or template instantiated there with AVX-512 instructions could be the copy the
// linker keeps for everyone. So those files include only <immintrin.h> and <cstdint>-like C headers
// and keep their helpers in an anonymous namespace, or make each level's template instantiation
// distinct (a parameter of the vector width). The test isa_objects_define_nothing_shared checks the
// objects (tests/kernels/check_isa_objects.cmake).
//
// RINGGRAD_CPU_ISA=baseline|avx2|avx512 lowers the choice (to compare kernels on one machine, or to
// run the portable path in a test); asking for more than the CPU has is an error.
#pragma once

namespace ringgrad {
namespace kernels {
namespace cpu {

enum class Isa { baseline, avx2, avx512 };

// The widest level both this CPU (and its operating system) supports and RINGGRAD_CPU_ISA allows.
// Decided once, on first use.
Isa cpu_isa();

// The widest level the CPU supports, ignoring RINGGRAD_CPU_ISA (for tests that try every level).
Isa cpu_isa_supported();

// "baseline", "avx2" or "avx512": the spelling RINGGRAD_CPU_ISA takes.
const char* isa_name(Isa isa);

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
