// <cuda.h> for the kernel emulator: the driver API's types that ringgrad names. ringgrad never links
// the driver; it reaches the two driver functions it asks (which context is current, whether a
// device has one) through cudaGetDriverEntryPointByVersion, which the emulator answers.
#pragma once

typedef enum cudaError_enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 } CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
