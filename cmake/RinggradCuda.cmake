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

# NCCL (the "nccl" process-group backend) comes with the CUDA toolkit here, or from NVIDIA's libnccl-dev.
# Found -> RINGGRAD_WITH_NCCL; not found -> the backend answers "not in this build".
set(RINGGRAD_WITH_NCCL OFF)
if(RINGGRAD_WITH_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib /usr/local/cuda/lib)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(RINGGRAD_WITH_NCCL ON)
  endif()
  message(STATUS "ringgrad: NCCL backend ${RINGGRAD_WITH_NCCL} (${NCCL_LIBRARY})")
endif()
