// kernels/cuda/probe.cu: the CUDA toolchain probe, saxpy y = a*x + y on float32.
//
// Budget : per element, reads x and y (8 B), writes y (4 B), 2 FLOPs (one FMA): 2 FLOPs per 12 bytes,
//          about 0.17 FLOP/byte, far below an H200's ~14 FLOP/byte balance point, so it is memory-bound:
//          judge it in GB/s against DRAM bandwidth (H200: 4.8 TB/s), never in FLOP/s.
// Mapping: a grid-stride loop of 256-thread blocks; each thread handles elements i, i + grid, ...
//          so any n works with a capped grid.
// Purpose: proving the toolchain (sm_90 SASS + compute_90 PTX, the runtime, error checking). It is
//          timed nowhere; the kernels of the CUDA backend follow this file's shape.
#include "kernels/cuda/probe.h"

#include <algorithm>
#include <cstdint>

#include <ringgrad/core/base/error.h>
#include "core/base/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/stride_loop.cuh"
#include "kernels/cuda/runtime.h"

namespace ringgrad {
namespace kernels {
namespace {

constexpr int kThreadsPerBlock = 256;

__global__ void saxpy_kernel(int64_t n, float a, const float* __restrict__ x, float* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; RG_STEP(i, stride)) {
    y[i] = a * x[i] + y[i];
  }
}

// Device memory that is freed on every path out of the launcher, exceptions included.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { RINGGRAD_CUDA_CHECK(cudaMalloc(&ptr_, bytes)); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

}  // namespace

void cuda_probe_saxpy(float a, const std::vector<float>& x, std::vector<float>& y) {
  RINGGRAD_CHECK(x.size() == y.size(), "cuda_probe_saxpy: expected x and y of the same size, got ", x.size(), " and ",
                 y.size());
  RINGGRAD_CHECK(cuda::device_count() > 0, "cuda_probe_saxpy: expected a CUDA GPU, found none");
  const int64_t n = static_cast<int64_t>(x.size());
  if (n == 0) return;
  const size_t bytes = x.size() * sizeof(float);

  DeviceBuffer dx(bytes), dy(bytes);
  RINGGRAD_CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), bytes, cudaMemcpyHostToDevice));
  RINGGRAD_CUDA_CHECK(cudaMemcpy(dy.get(), y.data(), bytes, cudaMemcpyHostToDevice));
  // Enough blocks to keep every SM busy (device_limits); the grid-stride loop covers larger arrays.
  const int64_t blocks = std::min<int64_t>((n + kThreadsPerBlock - 1) / kThreadsPerBlock,
                                           cuda::current_device_limits().busy_blocks(kThreadsPerBlock));
  cuda::launch_kernel("saxpy_kernel", saxpy_kernel, static_cast<unsigned>(blocks), kThreadsPerBlock, 0, nullptr, n, a,
                      dx.get(), dy.get());
  // A blocking copy on the default stream: it waits for the kernel, and reports its faults.
  RINGGRAD_CUDA_CHECK(cudaMemcpy(y.data(), dy.get(), bytes, cudaMemcpyDeviceToHost));
}

}  // namespace kernels
}  // namespace ringgrad
