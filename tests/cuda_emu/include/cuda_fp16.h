// <cuda_fp16.h> for the kernel emulator: __half and its conversions (cuda_emu/fp16.h).
#pragma once

#include "cuda_emu/fp16.h"
