// kernels/cuda/copy.h: the CUDA launchers of fill, arange and the strided copy with dtype cast.
//
// Each mirrors the Backend function of the same name (kernels/backend.h) with device pointers and a
// cudaStream_t, runs asynchronously on `stream`, and takes every storage dtype (f32, f64, i64, u8,
// bf16, f16). Private to the library and its tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {
namespace cuda {

void fill(DType dt, void* dst, int64_t n, double value, cudaStream_t stream);
void arange(DType dt, void* dst, int64_t n, double start, double step, cudaStream_t stream);
void copy(DType src_dt, const StridedDesc& src, DType dst_dt, const StridedDesc& dst, cudaStream_t stream);

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
