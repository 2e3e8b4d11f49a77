// kernels/backend.cpp: backend_for(), the one place that picks a backend for a device kind -- and,
// in a CPU-only build, the answers of core/cuda.h (no devices; everything else says how to get CUDA).
#include "kernels/backend.h"

#include "core/cuda.h"
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef RINGGRAD_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace ringgrad {

Backend& backend_for(DeviceKind kind, const char* op) {
  if (kind == DeviceKind::CPU) return cpu_backend();
#ifdef RINGGRAD_WITH_CUDA
  return cuda_backend(op);  // throws, naming op, when no GPU is visible
#else
  throw Error(detail::str(op, ": no CUDA backend in this build (configure with -DRINGGRAD_CUDA=ON)"));
#endif
}

bool built_with_cuda() {
#ifdef RINGGRAD_WITH_CUDA
  return true;
#else
  return false;
#endif
}

#ifndef RINGGRAD_WITH_CUDA
// A CPU-only build: there are no CUDA devices, which is an answer, not an error; asking anything of
// a device that cannot exist here is.
namespace {
[[noreturn]] void no_cuda(const char* op) {
  throw Error(detail::str(op, ": no CUDA backend in this build (configure with -DRINGGRAD_CUDA=ON)"));
}
}  // namespace

int cuda_device_count() { return 0; }
void cuda_synchronize(int) { no_cuda("cuda_synchronize"); }
MemoryStats cuda_memory_stats(int) { no_cuda("cuda_memory_stats"); }
void cuda_reset_peak_memory_stats(int) { no_cuda("cuda_reset_peak_memory_stats"); }
void cuda_empty_cache() {}  // nothing can be cached
Allocator& cuda_pinned_allocator() { no_cuda("cuda_pinned_allocator"); }
MemoryStats cuda_pinned_memory_stats() { no_cuda("cuda_pinned_memory_stats"); }
struct CudaReadyPoint {};
std::shared_ptr<CudaReadyPoint> cuda_mark_ready(int) { no_cuda("cuda_mark_ready"); }
void cuda_copy_to_pinned(const CudaReadyPoint&, const void*, void*, int64_t) { no_cuda("cuda_copy_to_pinned"); }
void cuda_copy_from_pinned(const CudaReadyPoint&, const void*, void*, int64_t) { no_cuda("cuda_copy_from_pinned"); }
#endif

}  // namespace ringgrad
