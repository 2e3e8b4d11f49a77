// kernels/cpu/cpu_backend.cpp: the process's single CpuBackend.
#include "kernels/cpu/cpu_backend.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ringgrad {

void CpuBackend::set_thread_count(int threads) {
#ifdef _OPENMP
  // Eigen asks omp_get_max_threads(), which reads this thread's setting: it limits only the GEMMs
  // started from the calling thread, not the user's main thread.
  omp_set_num_threads(threads < 1 ? 1 : threads);
#else
  (void)threads;  // built without OpenMP: every kernel is single-threaded anyway
#endif
}

Backend& cpu_backend() {
  // A function-local static is built on first use, thread-safely, and needs no registration order.
  static CpuBackend backend;
  return backend;
}

}  // namespace ringgrad
