// kernels/cuda/reduce.h: sum and max (+ first argmax) over the middle axis of a dense [outer, r, inner]
// array, and scatter_add_dim, the backward of max -- the CUDA launchers of the Backend functions of
// the same names (kernels/backend.h). Device pointers; asynchronous on `stream`; f32, f64, bf16 and
// f16 (the 16-bit ones are accumulated in double like the others). Private to the library and its
// tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {
namespace cuda {

// indices may be null (values only); it is ignored for Sum. Throws for Max over r == 0.
void reduce(ReduceOp op, DType dt, const void* x, void* y, int64_t* indices, int64_t outer, int64_t r, int64_t inner,
            cudaStream_t stream);
// dst[o, index[o, i], i] += src[o, i]. An index outside [0, r) cannot be reported from the device
// without a synchronisation, so it is skipped (the CPU backend throws); core/ validates indices it
// did not produce itself.
void scatter_add_dim(DType dt, const void* src, const int64_t* index, void* dst, int64_t outer, int64_t r,
                     int64_t inner, cudaStream_t stream);

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
