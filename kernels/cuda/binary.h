// kernels/cuda/binary.h: the CUDA launcher of the broadcasting binary ops (add, sub, mul, div).
//
// Mirrors Backend::binary (kernels/backend.h) with device pointers and a cudaStream_t, runs
// asynchronously on `stream`, and throws ringgrad::Error for a dtype other than f32, f64, bf16 and
// f16 (the 16-bit ones are computed in float). Private to the library and its tests.
#pragma once

#include <cuda_runtime.h>

#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {
namespace cuda {

void binary(BinaryOp op, DType dt, const StridedDesc& a, const StridedDesc& b, void* out, cudaStream_t stream);

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
