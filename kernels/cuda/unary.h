// kernels/cuda/unary.h: the CUDA launchers of the unary ops (kernels/unary_ops.h) and their backward.
//
// Each mirrors the Backend function of the same name (kernels/backend.h) with device pointers and a
// cudaStream_t, runs asynchronously on `stream`, and throws ringgrad::Error for a dtype other than
// f32, f64, bf16 and f16 (the 16-bit ones are computed in float). Private to the library and its
// tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {
namespace cuda {

void unary(UnaryOp op, DType dt, const void* x, void* y, int64_t n, double alpha, cudaStream_t stream);
// `saved` is x or y as unary_saved(op) says; ignored (and may be null) for the ops that save nothing.
void unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n, double alpha,
                    cudaStream_t stream);

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
