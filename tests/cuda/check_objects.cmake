# tests/cuda/check_objects.cmake: fails when an object that nvcc compiled from kernels/cuda/*.cu
# references exit(). That reference is the mark of a __device__-only function called from host code:
# nvcc 13 accepts the call silently and compiles a host stub for it that ends the process with
# status 1 and no message. Host/device callability must be explicit (__host__ __device__).
#
#   cmake -DNM=/usr/bin/nm "-DOBJECTS=a.cu.o|b.cu.o|c.cpp.o" -P check_objects.cmake
string(REPLACE "|" ";" objects "${OBJECTS}")
set(checked 0)
set(offenders "")
foreach(object ${objects})
  if(NOT object MATCHES "\\.cu\\.o$")
    continue()
  endif()
  execute_process(COMMAND ${NM} -u ${object} OUTPUT_VARIABLE undefined RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm -u ${object} failed (exit ${rc})")
  endif()
  math(EXPR checked "${checked} + 1")
  if(undefined MATCHES "(^|\n)[ \t]*U exit(\n|$)")
    list(APPEND offenders ${object})
  endif()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no .cu object among the ones given: nothing was checked")
endif()
if(offenders)
  string(REPLACE ";" "\n  " listed "${offenders}")
  message(FATAL_ERROR "these CUDA objects call exit() -- a __device__-only function is called from host code "
                      "(nvcc compiled a host stub that ends the process):\n  ${listed}\n"
                      "look in that file for a __device__ function that a host function (a launcher) calls")
endif()
message(STATUS "${checked} CUDA objects checked: none references exit()")
