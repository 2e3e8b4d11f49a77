// core/cuda.cpp: core/cuda.h, answered by the CUDA backend's device runtime (kernels/backend.h).
//
// A build without the CUDA backend has no devices, which is an answer, not an error; asking anything
// of a device that cannot exist here is, and the error says how to get one.
#include <ringgrad/core/cuda.h>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/device.h>
#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace {

kernels::Backend& cuda_runtime(const char* call) {
  kernels::Backend* backend = kernels::built_backend(DeviceKind::CUDA);
  if (backend == nullptr) {
    throw Error(kernels::no_cuda_backend_message(call));
  }
  return *backend;
}

}  // namespace

// The backend's marker, plus the device it was taken on (every staging copy runs on that device).
struct CudaReadyPoint {
  int device;
  std::unique_ptr<kernels::ReadyPoint> point;
};

bool built_with_cuda() { return kernels::built_backend(DeviceKind::CUDA) != nullptr; }

int cuda_device_count() {
  kernels::Backend* backend = kernels::built_backend(DeviceKind::CUDA);
  return backend == nullptr ? 0 : backend->device_count();
}

void cuda_synchronize(int device) { cuda_runtime("cuda_synchronize").synchronize(device); }

Stream cuda_stream(int device) {
  check_device(Device::cuda(device), "cuda_stream");
  return kernels::backend_for(DeviceKind::CUDA, "cuda_stream").stream_for(device);
}

CudaDeviceGuard::CudaDeviceGuard(int device) {
  const int previous = cuda_runtime("CudaDeviceGuard").exchange_current_device(device);
  if (previous != device) previous_ = previous;
}

CudaDeviceGuard::~CudaDeviceGuard() {
  // A destructor must not throw; making a device current that was current a moment ago does not fail.
  if (previous_ < 0) return;
  try {
    cuda_runtime("CudaDeviceGuard").exchange_current_device(previous_);
  } catch (...) {
  }
}

MemoryStats cuda_memory_stats(int device) { return cuda_runtime("cuda_memory_stats").memory_stats(device); }

void cuda_reset_peak_memory_stats(int device) {
  cuda_runtime("cuda_reset_peak_memory_stats").reset_peak_memory_stats(device);
}

void cuda_empty_cache() {
  if (kernels::Backend* backend = kernels::built_backend(DeviceKind::CUDA))
    backend->empty_cache();  // else nothing is cached
}

Allocator& cuda_pinned_allocator() { return cuda_runtime("cuda_pinned_allocator").pinned_allocator(); }

MemoryStats cuda_pinned_memory_stats() { return cuda_runtime("cuda_pinned_memory_stats").pinned_memory_stats(); }

std::shared_ptr<CudaReadyPoint> cuda_mark_ready(int device) {
  auto ready = std::make_shared<CudaReadyPoint>();
  ready->device = device;
  ready->point = cuda_runtime("cuda_mark_ready").mark_ready(device);
  return ready;
}

void cuda_copy_to_pinned(const CudaReadyPoint& ready, const void* src, void* pinned_dst, int64_t nbytes) {
  cuda_runtime("cuda_copy_to_pinned").copy_to_pinned(ready.device, *ready.point, src, pinned_dst, nbytes);
}

void cuda_copy_from_pinned(const CudaReadyPoint& after, const void* pinned_src, void* dst, int64_t nbytes) {
  cuda_runtime("cuda_copy_from_pinned").copy_from_pinned(after.device, *after.point, pinned_src, dst, nbytes);
}

}  // namespace ringgrad
