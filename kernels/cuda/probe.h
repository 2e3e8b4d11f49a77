// kernels/cuda/probe.h: the CUDA toolchain probe -- one real kernel, proving that nvcc, the sm_90
// code and the CUDA runtime all work in this build. Free of CUDA types, so plain .cpp files (the
// tests) can include it. Only built when RINGGRAD_CUDA is on; the CUDA backend proper is
// kernels/cuda/cuda_backend.h.
#pragma once

#include <vector>

namespace ringgrad {
namespace kernels {

// y = a*x + y on cuda:0: copies x and y to the device, runs saxpy_kernel, copies y back.
// Throws ringgrad::Error when x and y differ in size, or when there is no GPU.
void cuda_probe_saxpy(float a, const std::vector<float>& x, std::vector<float>& y);

}  // namespace kernels
}  // namespace ringgrad
