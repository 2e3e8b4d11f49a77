// core/base/cuda_check.h: RINGGRAD_CUDA_CHECK(call), which turns a failed CUDA runtime call into
// a ringgrad::Error naming the call, where it was made and on which device:
//
//   RINGGRAD_CUDA_CHECK(cudaMalloc(&p, bytes));
//   // ringgrad::Error: cudaMalloc(&p, bytes) failed: cudaErrorMemoryAllocation (out of memory)
//   //                  at kernels/cuda/probe.cu:61 on cuda:0
//
// Kernel launches return nothing: launch_kernel() (kernels/cuda/launch.cuh) checks cudaGetLastError() after each.
// Private to the library: it needs the CUDA toolkit's headers, which users of ringgrad need not have.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // Reset the runtime's "last error", so that the next check does not report this failure again.
  (void)cudaGetLastError();
  int device = -1;
  std::string where = cudaGetDevice(&device) == cudaSuccess ? str("cuda:", device) : std::string("no device");
  (void)cudaGetLastError();
  throw Error(str(call, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") at ", file, ":", line,
                  " on ", where));
}

}  // namespace detail
}  // namespace ringgrad

#define RINGGRAD_CUDA_CHECK(call)                                                          \
  do {                                                                                     \
    const cudaError_t ringgrad_cuda_err_ = (call);                                         \
    if (ringgrad_cuda_err_ != cudaSuccess)                                                 \
      ::ringgrad::detail::throw_cuda_error(ringgrad_cuda_err_, #call, __FILE__, __LINE__); \
  } while (false)
