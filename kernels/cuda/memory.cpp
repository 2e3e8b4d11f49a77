// kernels/cuda/memory.cpp: where CUDA memory comes from -- the caching allocator of core/ over
// cudaMalloc/cudaFree for tensors, and over cudaHostAlloc/cudaFreeHost for pinned staging buffers --
// and the CUDA backend's answers about them (what core/cuda.h reports).
//
// All the policy (rounding, reuse, statistics, the out-of-memory retry) is CachingAllocator's and is
// tested on the CPU (tests/core/test_caching_allocator.cpp); this file only supplies raw memory.
#include <cuda_runtime.h>

#include <ringgrad/core/base/caching_allocator.h>
#include <ringgrad/core/base/error.h>
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/runtime.h"

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

// cudaMalloc/cudaFree on the given device. Out of memory is reported as null, so the caching
// allocator can empty its cache and retry; every other failure throws.
class DeviceRawMemory final : public RawMemory {
 public:
  void* raw_alloc(int64_t nbytes, int device) override {
    CudaDeviceGuard guard(device);
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, static_cast<size_t>(nbytes));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it, or the next RINGGRAD_CUDA_CHECK(cudaGetLastError()) reports it
      return nullptr;
    }
    RINGGRAD_CUDA_CHECK(err);
    return ptr;
  }
  void raw_free(void* ptr, int device) override {
    CudaDeviceGuard guard(device);
    RINGGRAD_CUDA_CHECK(cudaFree(ptr));
  }
  // A cached block was freed by its tensor while kernels queued on the device's stream may still
  // read it; cudaFree must not pull it from under them.
  void synchronize(int device) override { cuda::synchronize(device); }
};

// Page-locked host memory, usable by every device (cudaHostAllocPortable). It belongs to no device;
// the caching allocator files it all under device 0.
class PinnedRawMemory final : public RawMemory {
 public:
  void* raw_alloc(int64_t nbytes, int) override {
    // Portable pinned memory serves every device, but the call needs a context: on a thread with
    // none, use a device that already has one rather than create one on cuda:0 (as PyTorch does).
    CudaDeviceGuard guard(device_for_host_call());
    void* ptr = nullptr;
    const cudaError_t err = cudaHostAlloc(&ptr, static_cast<size_t>(nbytes), cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    RINGGRAD_CUDA_CHECK(err);
    return ptr;
  }
  void raw_free(void* ptr, int) override {
    CudaDeviceGuard guard(device_for_host_call());
    RINGGRAD_CUDA_CHECK(cudaFreeHost(ptr));
  }
  // Users of a pinned buffer synchronise before freeing it (core/cuda.h), so there is nothing to wait for.
};

CachingAllocator& pinned_allocator() {
  check_device(0, "cuda_pinned_allocator");
  static auto* raw = new PinnedRawMemory();
  static auto* allocator = new CachingAllocator(*raw, DeviceKind::CPU);  // never destroyed, as below
  return *allocator;
}

}  // namespace

CachingAllocator& device_allocator() {
  // Never destroyed: a tensor freed during static destruction must find its allocator alive, and
  // freeing at exit would race the CUDA runtime's own teardown. The driver reclaims it all at exit.
  static auto* raw = new DeviceRawMemory();
  static auto* allocator = new CachingAllocator(*raw, DeviceKind::CUDA, [](int device) {
    return static_cast<Stream>(stream_for(device));  // blocks are used on the device's ringgrad stream
  });
  return *allocator;
}

}  // namespace cuda

MemoryStats CudaBackend::memory_stats(int device) {
  cuda::check_device(device, "cuda_memory_stats");
  return cuda::device_allocator().stats(device);
}

void CudaBackend::reset_peak_memory_stats(int device) {
  cuda::check_device(device, "cuda_reset_peak_memory_stats");
  cuda::device_allocator().reset_peak(device);
}

void CudaBackend::empty_cache() {
  if (cuda::device_count() == 0) return;  // nothing was ever cached
  cuda::device_allocator().empty_cache();
}

Allocator& CudaBackend::pinned_allocator() { return cuda::pinned_allocator(); }

MemoryStats CudaBackend::pinned_memory_stats() { return cuda::pinned_allocator().stats(0); }

}  // namespace kernels
}  // namespace ringgrad
