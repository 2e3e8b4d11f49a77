// kernels/cuda/launch.cuh: launch_kernel(), the one way kernels/cuda starts a kernel.
//
//   launch_kernel("fill_kernel", fill_kernel<T>, grid, block, 0, stream, dst, n, value);
//
// is kernel<<<grid, block, shared_bytes, stream>>>(args...) followed by the launch check, with the
// kernel's name in the error. Going through one function is what lets the same .cu sources run on
// the CPU: in the kernel emulator's build (RINGGRAD_CUDA_EMU, tests/cuda_emu) the call becomes
// cuda_emu::launch(), which runs the grid's threads as fibers; with nvcc it is the <<<>>> launch.
//
// Private to kernels/cuda/*.cu (it is CUDA source, included only by nvcc-compiled files).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace kernels {
namespace cuda {

template <typename... Params, typename... Args>
void launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, Args&&... args) {
#ifdef RINGGRAD_CUDA_EMU
  ::cuda_emu::launch(name, kernel, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
#else
  // clang-format 14 reads a .cuh file as C++ and would split the launch chevrons.
  // clang-format off
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
  // clang-format on
#endif
  // A bad configuration or stream is reported here; a fault inside the kernel at the next
  // synchronisation (cudaStreamSynchronize, a blocking copy), as with any asynchronous launch.
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw Error(detail::str("launch of ", name, " (grid ", grid.x, "x", grid.y, "x", grid.z, ", block ", block.x, "x",
                            block.y, "x", block.z, ") failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                            ")"));
  }
}

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
