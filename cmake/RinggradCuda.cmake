# RINGGRAD_CUDA=AUTO|ON|OFF -> RINGGRAD_WITH_CUDA. AUTO turns CUDA on when a CUDA compiler is found;
# ON fails loudly when none is. Code is built for sm_90 (H100/H200) as SASS plus PTX, so newer GPUs
# can JIT it; override with -DCMAKE_CUDA_ARCHITECTURES=...
set(RINGGRAD_WITH_CUDA OFF)
if(NOT RINGGRAD_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)  # Debian's PATH may not have it
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # "90" = sm_90 SASS + compute_90 PTX
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(RINGGRAD_WITH_CUDA ON)
  elseif(RINGGRAD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "RINGGRAD_CUDA=ON but no CUDA compiler was found; install the CUDA toolkit or use AUTO/OFF")
  endif()
endif()
message(STATUS "ringgrad: CUDA backend ${RINGGRAD_WITH_CUDA} (RINGGRAD_CUDA=${RINGGRAD_CUDA})")
