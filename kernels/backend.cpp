// kernels/backend.cpp: backend_for(), the one place that picks a backend for a device kind, and the
// answers of a backend that has no device runtime of its own (Backend's defaults).
#include <ringgrad/kernels/backend.h>

#include <ringgrad/core/base/error.h>
#include "kernels/cpu/cpu_backend.h"
#ifdef RINGGRAD_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace ringgrad {
namespace kernels {

Backend& backend_for(DeviceKind kind, const char* op) {
  if (kind == DeviceKind::CPU) return cpu_backend();
#ifdef RINGGRAD_WITH_CUDA
  return cuda_backend(op);  // throws, naming op, when no GPU is visible
#else
  throw Error(detail::str(op, ": no CUDA backend in this build (configure with -DRINGGRAD_CUDA=ON)"));
#endif
}

Backend* built_backend(DeviceKind kind) {
  if (kind == DeviceKind::CPU) return &cpu_backend();
#ifdef RINGGRAD_WITH_CUDA
  return &cuda_backend_instance();
#else
  return nullptr;
#endif
}

// ---- Backend's device runtime, for a backend without one --------------------------------------------
namespace {
[[noreturn]] void no_runtime(const Backend& backend, const char* call) {
  throw Error(detail::str(call, ": the ", backend.name(), " backend has no device runtime of its own"));
}
}  // namespace

void Backend::synchronize(int) { no_runtime(*this, "synchronize"); }
int Backend::exchange_current_device(int) { no_runtime(*this, "exchange_current_device"); }
MemoryStats Backend::memory_stats(int) { no_runtime(*this, "memory_stats"); }
void Backend::reset_peak_memory_stats(int) { no_runtime(*this, "reset_peak_memory_stats"); }
Allocator& Backend::pinned_allocator() { no_runtime(*this, "pinned_allocator"); }
MemoryStats Backend::pinned_memory_stats() { no_runtime(*this, "pinned_memory_stats"); }
std::unique_ptr<ReadyPoint> Backend::mark_ready(int) { no_runtime(*this, "mark_ready"); }
void Backend::copy_to_pinned(int, const ReadyPoint&, const void*, void*, int64_t) {
  no_runtime(*this, "copy_to_pinned");
}
void Backend::copy_from_pinned(int, const ReadyPoint&, const void*, void*, int64_t) {
  no_runtime(*this, "copy_from_pinned");
}

}  // namespace kernels
}  // namespace ringgrad
