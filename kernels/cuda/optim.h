// kernels/cuda/optim.h: fused SGD and Adam/AdamW steps on the GPU -- one pass over a parameter, its
// gradient and its optimizer state, in place -- for one tensor (the Backend's sgd_step/adam_step,
// kernels/backend.h) or for many tensors in one launch. Exactly the arithmetic of kernels/cpu/optim.cpp
// (PyTorch 1.13's single-tensor rules, scalar factors formed in double then rounded to the dtype).
// Device pointers; asynchronous on `stream`; f32 and f64. Private to the library and its tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {
namespace cuda {

void sgd_step(DType dt, void* param, const void* grad, void* momentum_buffer /* null when momentum == 0 */, int64_t n,
              const SgdStepArgs& args, cudaStream_t stream);
void adam_step(DType dt, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
               const AdamStepArgs& args, cudaStream_t stream);

// One parameter of a multi-tensor step: device pointers to dense arrays of n elements.
struct SgdTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  void* momentum_buffer = nullptr;  // null when momentum == 0
  int64_t n = 0;
};
struct AdamTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  int64_t n = 0;
};

// The same updates over `count` tensors of one dtype and one set of hyperparameters, in as few
// launches as the kernel-parameter table allows (one for a typical MLP): a launch per tensor would
// cost ~3 us of launch latency each, more than the update of a small bias takes.
void sgd_step_multi(DType dt, const SgdTensor* tensors, int count, const SgdStepArgs& args, cudaStream_t stream);
void adam_step_multi(DType dt, const AdamTensor* tensors, int count, const AdamStepArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
