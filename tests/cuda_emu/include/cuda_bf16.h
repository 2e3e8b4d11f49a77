// <cuda_bf16.h> for the kernel emulator: __nv_bfloat16 and its conversions (cuda_emu/bf16.h).
#pragma once

#include "cuda_emu/bf16.h"
