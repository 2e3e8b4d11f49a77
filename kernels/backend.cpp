// kernels/backend.cpp: backend_for(), the one place that picks a backend for a device kind; the
// registry through which the CUDA backend joins a program; and the answers of a backend that has no
// device runtime of its own (Backend's defaults).
//
// Why a registry and not #ifdef RINGGRAD_WITH_CUDA here: the CUDA backend is its own library
// (libringgrad_cuda.a, ringgrad::cuda), which needs the CUDA runtime and cuBLAS. The core library
// that every program links must not name it, or a CPU-only program would need CUDA to link and run.
#include <ringgrad/kernels/backend.h>

#include <array>
#include <atomic>
#include <mutex>

#include <ringgrad/core/base/error.h>
#include "kernels/cpu/cpu_backend.h"

namespace ringgrad {
namespace kernels {
namespace {

// One slot per device kind but the CPU's, indexed by DeviceKind. Atomics, zero before any static
// initialiser runs: registrations come from other libraries' static initialisers, in an unspecified
// order against this file's, and every CUDA op reads its slot, so reading takes no lock.
using UsableFn = Backend& (*)(const char*);
using InstanceFn = Backend& (*)();
std::array<std::atomic<UsableFn>, 2> g_usable{};
std::array<std::atomic<InstanceFn>, 2> g_instance{};
std::mutex g_register_mutex;  // registrations only: one at a time

}  // namespace

void register_device_backend(DeviceKind kind, DeviceBackendRegistration registration) {
  RINGGRAD_CHECK(kind != DeviceKind::CPU && registration.usable != nullptr && registration.instance != nullptr,
                 "register_device_backend: expected a non-CPU device kind and both functions, got kind ",
                 static_cast<int>(kind));
  const auto k = static_cast<size_t>(kind);
  std::lock_guard<std::mutex> lock(g_register_mutex);
  const UsableFn usable = g_usable[k].load();
  // The same functions again: two copies of the library in one process (as kernels/family.h allows).
  if (usable == registration.usable && g_instance[k].load() == registration.instance) return;
  RINGGRAD_CHECK(usable == nullptr, "register_device_backend: device kind ", static_cast<int>(kind),
                 " already has a backend");
  g_instance[k].store(registration.instance);
  g_usable[k].store(registration.usable);  // last: a reader that sees it sees the instance too
}

std::string no_cuda_backend_message(const char* call) {
  return detail::str(call,
                     ": no CUDA backend in this program: it needs ringgrad configured with CUDA (-DRINGGRAD_CUDA=ON) "
                     "and the program linked with ringgrad::cuda (from find_package(ringgrad COMPONENTS cuda), or "
                     "add_subdirectory)");
}

Backend& backend_for(DeviceKind kind, const char* op) {
  if (kind == DeviceKind::CPU) return cpu_backend();
  const UsableFn usable = g_usable.at(static_cast<size_t>(kind)).load();
  if (usable == nullptr) throw Error(no_cuda_backend_message(op));
  return usable(op);  // throws, naming op, when no GPU is visible
}

Backend* built_backend(DeviceKind kind) {
  if (kind == DeviceKind::CPU) return &cpu_backend();
  if (g_usable.at(static_cast<size_t>(kind)).load() == nullptr) return nullptr;
  return &g_instance.at(static_cast<size_t>(kind)).load()();
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
