// tests/cuda_emu/src/loop_trips.h: which of a kernel's stride loops made a second trip
// (loop_trips.cpp), for RINGGRAD_EMU_LOOP_REPORT.
//
// A grid-stride loop runs once per thread when the grid covers the work, which is what most tests'
// sizes give; a barrier or a reset that matters only between two trips is then never tested. The
// kernels step such loops with RG_STEP (kernels/cuda/stride_loop.cuh), which in the emulator calls
// count_trip() (cuda_emu/device.h) with the loop variable and the step. A loop is in its second trip
// of one pass when the variable is where the last step left it; any other value starts a new pass
// (an inner loop started again by its outer loop). A pass that happens to start exactly where the
// last one would have gone on is taken for its continuation.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace cuda_emu {

using LoopSite = std::pair<const char*, int>;  // __FILE__ and __LINE__ of an RG_STEP

// One emulated GPU thread's loops: where each would go on, and the trips of its current pass.
struct ThreadTrips {
  struct Pass {
    LoopSite site;
    long long next = 0;
    int trips = 0;
  };
  std::vector<Pass> passes;
};

// One launch's loops: each that ran, and whether some thread made two trips in one pass.
struct LaunchTrips {
  std::map<LoopSite, bool> repeated;
};

// Set by the scheduler while a launch, and one of its threads, runs.
extern thread_local ThreadTrips* current_thread_trips;
extern thread_local LaunchTrips* current_launch_trips;

// Whether RINGGRAD_EMU_LOOP_REPORT names a file: otherwise nothing is counted.
bool loop_report_enabled();
// Adds a finished launch of `kernel` to the process's counts, which are appended to the report
// file when the process exits: a line per kernel and loop, "file:line<TAB>kernel<TAB>launches in
// which it ran<TAB>launches in which some thread made a second trip".
void add_launch_trips(const char* kernel, const LaunchTrips& trips);

}  // namespace cuda_emu
