# tests/kernels/check_isa_objects.cmake: fails when an object compiled for a wider vector level
# (kernels/cpu/*_avx2.cpp, *_avx512.cpp: -march=x86-64-v3 / -v4) defines a weak or unique symbol.
# Such a symbol is an inline function or template instantiation that other files may define too;
# the linker keeps one copy for the whole program, and if it keeps this one, code compiled for the
# portable level runs AVX2 or AVX-512 instructions on a CPU without them (kernels/cpu/isa.h).
#
#   cmake -DNM=/usr/bin/nm "-DOBJECTS=a_avx2.cpp.o|b.cpp.o|..." -P check_isa_objects.cmake
string(REPLACE "|" ";" objects "${OBJECTS}")
set(checked 0)
set(offenders "")
foreach(object ${objects})
  if(NOT object MATCHES "_avx(2|512)\\.cpp\\.o$")
    continue()
  endif()
  execute_process(COMMAND ${NM} -C --defined-only ${object} OUTPUT_VARIABLE defined RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm --defined-only ${object} failed (exit ${rc})")
  endif()
  math(EXPR checked "${checked} + 1")
  # W/V: weak, u: unique global (GCC's for inline variables and template statics).
  string(REGEX MATCHALL "[^\n]* [WVu] [^\n]*" shared "${defined}")
  if(shared)
    string(REPLACE ";" "\n    " listed "${shared}")
    string(APPEND offenders "\n  ${object}:\n    ${listed}")
  endif()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no *_avx2.cpp or *_avx512.cpp object among the ones given: nothing was checked")
endif()
if(offenders)
  message(FATAL_ERROR "objects compiled for AVX2 / AVX-512 define symbols another object may define too "
                      "(inline functions, template instantiations):${offenders}\n"
                      "keep such helpers in an anonymous namespace, or make each level's instantiation "
                      "distinct (a template parameter of the vector width)")
endif()
message(STATUS "${checked} AVX2 / AVX-512 objects checked: no weak or unique symbols")
