// kernels/cpu/cpu_backend.cpp: the process's single CpuBackend.
#include "kernels/cpu/cpu_backend.h"

#include "kernels/cpu/thread_pool.h"

namespace ringgrad {
namespace kernels {

// The setting is per calling thread: it limits the GEMMs a device's worker starts, not the user's
// main thread.
void CpuBackend::set_thread_count(int threads) { cpu::set_kernel_threads(threads); }

Backend& cpu_backend() {
  // A function-local static is built on first use, thread-safely, and needs no registration order.
  static CpuBackend backend;
  return backend;
}

}  // namespace kernels
}  // namespace ringgrad
