// kernels/cuda/random.h: the CUDA launchers of the random draws and dropout.
//
// Each mirrors the Backend function of the same name (kernels/backend.h) with device pointers and a
// cudaStream_t, runs asynchronously on `stream`, and throws ringgrad::Error for a dtype it does not
// support: random takes f32 and f64, dropout also bf16 and f16 (drawn and computed in float).
// Private to the library and its tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {
namespace cuda {

// Element i uses Philox counter offset + i under `seed`: bit-identical to the CPU backend's uniform
// draw and its dropout mask (normal draws agree to libm-vs-CUDA-math rounding).
void random(RandomKind kind, DType dt, void* dst, int64_t n, uint64_t seed, uint64_t offset, double a, double b,
            cudaStream_t stream);
void dropout(DType dt, const void* x, void* y, void* mask, int64_t n, double p, uint64_t seed, uint64_t offset,
             cudaStream_t stream);

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
