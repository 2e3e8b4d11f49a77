// <cuda_runtime.h> for the kernel emulator: the runtime API, device code as host C++, and the
// launch that kernels/cuda/launch.cuh calls. The real header is the CUDA toolkit's; this directory
// is on the include path of the emulated build only (tests/cuda_emu/CMakeLists.txt).
#pragma once

#include "cuda_emu/runtime_api.h"
#include "cuda_emu/device.h"
#include "cuda_emu/launch.h"
