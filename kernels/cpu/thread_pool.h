// kernels/cpu/thread_pool.h: the threads a large CPU kernel (GEMM) splits its work across.
//
// Why not OpenMP: libgomp's threads spin while they wait for work. That is fast on an idle machine
// and disastrous on a busy one -- with one other process running, a 2-thread GEMM team on 2 cores
// went from 4 ms to 40-70 ms per product here, because a spinning thread holds the core its partner
// needs. These threads sleep on a condition variable instead, and the calling thread does a share
// of the work itself, so a split costs one wake-up per helper.
#pragma once

#include <functional>

namespace ringgrad {
namespace kernels {
namespace cpu {

// How many threads kernels started from the calling thread may use (itself included). Defaults to
// the number of cores; each logical CPU device's worker sets its share (Backend::set_thread_count).
int kernel_threads();
void set_kernel_threads(int threads);

// Runs fn(0) ... fn(parts - 1), spread over the calling thread and the pool's helpers, and returns
// when all have finished. The first exception thrown by any part is rethrown here.
void parallel_for(int parts, const std::function<void(int part)>& fn);

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
