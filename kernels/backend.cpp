// kernels/backend.cpp: backend_for(), the one place that picks a backend for a device kind; the
// registry through which the CUDA backend joins a program; and the answers of a backend that has no
// device runtime of its own (Backend's defaults).
//
// Why a registry and not #ifdef RINGGRAD_WITH_CUDA here: the CUDA backend is its own library
// (libringgrad_cuda.a, ringgrad::cuda), which needs the CUDA runtime and cuBLAS. The core library
// that every program links must not name it, or a CPU-only program would need CUDA to link and run.
#include <ringgrad/kernels/backend.h>

#include <array>
#include <mutex>

#include <ringgrad/core/base/error.h>
#include "kernels/cpu/cpu_backend.h"

namespace ringgrad {
namespace kernels {
namespace {

// One slot per device kind but the CPU's. A function-local static: registrations come from static
// initialisers of other libraries, whose order against this file's is unspecified.
struct DeviceBackends {
  std::mutex mutex;
  std::array<DeviceBackendRegistration, 2> by_kind;  // indexed by DeviceKind
};
DeviceBackends& device_backends() {
  static DeviceBackends backends;
  return backends;
}

DeviceBackendRegistration registered(DeviceKind kind) {
  DeviceBackends& backends = device_backends();
  std::lock_guard<std::mutex> lock(backends.mutex);
  return backends.by_kind.at(static_cast<size_t>(kind));
}

}  // namespace

void register_device_backend(DeviceKind kind, DeviceBackendRegistration registration) {
  RINGGRAD_CHECK(kind != DeviceKind::CPU && registration.usable != nullptr && registration.instance != nullptr,
                 "register_device_backend: expected a non-CPU device kind and both functions, got kind ",
                 static_cast<int>(kind));
  DeviceBackends& backends = device_backends();
  std::lock_guard<std::mutex> lock(backends.mutex);
  DeviceBackendRegistration& slot = backends.by_kind.at(static_cast<size_t>(kind));
  // The same functions again: two copies of the library in one process (as kernels/family.h allows).
  if (slot.usable == registration.usable && slot.instance == registration.instance) return;
  RINGGRAD_CHECK(slot.usable == nullptr, "register_device_backend: device kind ", static_cast<int>(kind),
                 " already has a backend");
  slot = registration;
}

std::string no_cuda_backend_message(const char* call) {
  return detail::str(call,
                     ": no CUDA backend in this program: it needs ringgrad configured with CUDA (-DRINGGRAD_CUDA=ON) "
                     "and the program linked with ringgrad::cuda (find_package(ringgrad COMPONENTS cuda))");
}

Backend& backend_for(DeviceKind kind, const char* op) {
  if (kind == DeviceKind::CPU) return cpu_backend();
  const DeviceBackendRegistration r = registered(kind);
  if (r.usable == nullptr) throw Error(no_cuda_backend_message(op));
  return r.usable(op);  // throws, naming op, when no GPU is visible
}

Backend* built_backend(DeviceKind kind) {
  if (kind == DeviceKind::CPU) return &cpu_backend();
  const DeviceBackendRegistration r = registered(kind);
  return r.instance == nullptr ? nullptr : &r.instance();
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
