// kernels/cpu/thread_pool.h: the threads a large CPU kernel splits its work across.
//
// Why not OpenMP: libgomp's threads spin while they wait for work. That is fast on an idle machine
// and disastrous on a busy one -- with one other process running, a 2-thread GEMM team on 2 cores
// went from 4 ms to 40-70 ms per product here, because a spinning thread holds the core its partner
// needs. These threads sleep on a condition variable instead, and the calling thread does a share
// of the work itself, so a split costs one wake-up per helper. Before sleeping, a thread that has
// just finished polls for 50 us at most (thread_pool.cpp, kPoll): kernels come in quick succession,
// and a poll that catches the next one saves a wake-up each side. With it, an add of 256K floats
// on 2 threads went from 33-70 to 91-115 GB/s and one of 1M from 25-43 to 45-47 (three runs each,
// build/bench/bench_elementwise --no-torch --ops add,relu --threads 2, the machine shared); a busy
// machine loses at most 50 us of a core per split, not OpenMP's 200 ms.
//
// Nesting is safe: a kernel called from inside a part (or from a helper) may split again. The
// caller of parallel_for claims every part nobody has claimed yet, and a thread that waits never
// claims anything, so a wait only ever waits for parts already running.
//
// Grain: splitting costs a wake-up (a few microseconds, more on a loaded machine), so a loop is split
// only when each part gets at least `grain` elements. kGrain is for memory-bound loops of about one
// operation per element (add, relu, sum, copy); loops bound by libm (tanh, exp in softmax) use
// kGrain / 8. Measured on this 2-core machine (Debian 12, other builds running) with kGrain
// temporarily 1024, so every size below split in two, by
//   for t in 1 2; do build/bench/bench_elementwise --no-torch --ops add,relu,tanh --reps 9
//     --sizes 4096,8192,16384,32768,65536,131072,262144 --threads $t; done   (one line)
// three times over. Speed-up of 2 threads over 1 (median of the three medians), float32:
//   elements   4K    8K    16K   32K   64K   128K  256K
//   add       0.35  0.40  0.54  0.74  0.77  1.38  1.49
//   relu      0.64  0.69  0.94  1.10  1.27  1.22  1.41
//   tanh      0.71  1.06  1.30  1.59  1.75  2.27  2.02
// So an add pays from about 128K elements, relu from 32K, tanh from 8K-16K: kGrain = 64K puts the
// first split (2 * kGrain) at 128K, and kGrain / 8 puts tanh's at 16K. When the machine was busier
// (load 3-5 from other builds) two threads gained nothing below 512K, whatever the grain.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

namespace ringgrad {
namespace kernels {
namespace cpu {

// Least number of elements of a memory-bound loop that one part is given (see the measurement above).
constexpr int64_t kGrain = 65536;

// Parts per thread: more parts than threads, claimed one at a time, so a helper that wakes late on a
// busy machine still takes its share of what is left instead of the caller doing everything.
constexpr int64_t kPartsPerThread = 4;

// How many threads kernels started from the calling thread may use (itself included). Defaults to
// the number of cores; each logical CPU device's worker sets its share (Backend::set_thread_count).
int kernel_threads();
void set_kernel_threads(int threads);

// Runs fn(0) ... fn(parts - 1), spread over the calling thread and the pool's helpers, and returns
// when all have finished. The first exception thrown by any part is rethrown here.
void parallel_for(int parts, const std::function<void(int part)>& fn);

// Calls fn(begin, end) on disjoint ranges that cover [0, n): one call fn(0, n) on the calling
// thread when n < 2 * grain or only one thread is allowed, else one range per part, with
// min(kPartsPerThread * kernel_threads(), n / grain) parts of nearly equal size. `grain` is the least work of a part,
// in whatever unit n counts (elements, rows, tiles). Below the grain nothing but two comparisons
// and the direct call happens: no std::function, no pool.
//
// Which ranges a thread gets depends on the thread count, so fn must compute each output element
// the same way whatever its range (for sums: fixed chunks, see reduce.cpp).
template <typename F>
void parallel_range(int64_t n, int64_t grain, F&& fn) {
  if (n < 2 * grain) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  const int threads = kernel_threads();
  const int64_t parts = std::min<int64_t>(kPartsPerThread * threads, n / std::max<int64_t>(grain, 1));
  if (parts <= 1 || threads == 1) {
    fn(int64_t{0}, n);
    return;
  }
  parallel_for(static_cast<int>(parts), [&](int part) {
    const int64_t begin = n * part / parts, end = n * (part + 1) / parts;
    if (end > begin) fn(begin, end);
  });
}

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
