// kernels/cuda/stride_loop.cuh: RG_STEP, the step of a loop whose trip count depends on the launch.
//
//   for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) y[i] = ...;  // grid-stride
//   for (int64_t j = lane; j < c; RG_STEP(j, kWarp)) acc += x[j];                     // warp-stride
//
// On a GPU, RG_STEP(i, step) is i += step. In the kernel emulator's build (RINGGRAD_CUDA_EMU) it also
// tells the emulator that a trip of the loop at this line ended, so that it can report which loops
// the tests ever ran twice in a row (RINGGRAD_EMU_LOOP_REPORT, tests/cuda_emu/src/loop_trips.h): a
// grid that covers the work runs each thread's loop once, and a barrier or a reset that matters
// only between two trips is then never tested. Every stride loop of kernels/cuda uses it; the
// loop_report test fails if one of them never made a second trip.
//
// Private to kernels/cuda/*.cu (it is CUDA source, included only by nvcc-compiled files).
#pragma once

#ifdef RINGGRAD_CUDA_EMU
#define RG_STEP(var, step)                                                                                \
  (::cuda_emu::count_trip(__FILE__, __LINE__, static_cast<long long>(var), static_cast<long long>(step)), \
   (var) += (step))
#else
#define RG_STEP(var, step) ((var) += (step))
#endif
