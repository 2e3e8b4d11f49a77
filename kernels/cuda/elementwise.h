// kernels/cuda/elementwise.h: the CUDA elementwise launchers -- fill, arange, strided copy with dtype
// cast, unary ops and their backward, broadcasting binary ops, random draws and dropout.
//
// Each mirrors the Backend function of the same name (kernels/backend.h documents the semantics)
// with device pointers and a cudaStream_t; each runs asynchronously on `stream` and throws
// ringgrad::Error for a dtype it does not support. Dtypes: fill, arange and copy take every storage
// dtype (f32, f64, i64, u8, bf16); unary, binary and dropout take f32, f64 and bf16 (bf16 is
// computed in float); random takes f32 and f64. Private to the library and its tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.h"

namespace ringgrad {
namespace cuda {

void fill(DType dt, void* dst, int64_t n, double value, cudaStream_t stream);
void arange(DType dt, void* dst, int64_t n, double start, double step, cudaStream_t stream);
void copy(DType src_dt, const StridedDesc& src, DType dst_dt, const StridedDesc& dst, cudaStream_t stream);
// Element i uses Philox counter offset + i under `seed`: bit-identical to the CPU backend's uniform
// draw and its dropout mask (normal draws agree to libm-vs-CUDA-math rounding).
void random(RandomKind kind, DType dt, void* dst, int64_t n, uint64_t seed, uint64_t offset, double a, double b,
            cudaStream_t stream);

void unary(UnaryOp op, DType dt, const void* x, void* y, int64_t n, double alpha, cudaStream_t stream);
void unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n, double alpha,
                    cudaStream_t stream);
void binary(BinaryOp op, DType dt, const StridedDesc& a, const StridedDesc& b, void* out, cudaStream_t stream);

void dropout(DType dt, const void* x, void* y, void* mask, int64_t n, double p, uint64_t seed, uint64_t offset,
             cudaStream_t stream);

}  // namespace cuda
}  // namespace ringgrad
