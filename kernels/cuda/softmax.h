// kernels/cuda/softmax.h: softmax and log_softmax over the middle axis of a dense [outer, c, inner]
// array, forward and backward, and the fused softmax-cross-entropy forward and backward -- the CUDA
// launchers of the Backend functions of the same names (kernels/backend.h documents the semantics).
// Device pointers; asynchronous on `stream`. softmax takes f32, f64, bf16 and f16 (the 16-bit ones
// computed in float); cross-entropy f32 and f64. Private to the library and its tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {
namespace cuda {

void softmax(DType dt, const void* x, void* y, int64_t outer, int64_t c, int64_t inner, bool log, cudaStream_t stream);
void softmax_backward(DType dt, const void* y, const void* dy, void* dx, int64_t outer, int64_t c, int64_t inner,
                      bool log, cudaStream_t stream);

// A label outside [0, c) cannot be reported from the device without a synchronisation (the CPU
// backend throws): its row's loss, and in the backward its row of dlogits, is set to NaN instead, so
// the mistake still shows. probs may be null when no backward will follow.
void cross_entropy_forward(DType dt, const void* logits, const int64_t* labels, void* loss, void* probs, int64_t rows,
                           int64_t c, double label_smoothing, cudaStream_t stream);
void cross_entropy_backward(DType dt, const void* probs, const int64_t* labels, const void* dloss, int64_t dloss_stride,
                            double scale, void* dlogits, int64_t rows, int64_t c, double label_smoothing,
                            cudaStream_t stream);

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
