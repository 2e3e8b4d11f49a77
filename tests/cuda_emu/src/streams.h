// tests/cuda_emu/src/streams.h: the emulator's streams as queues of work (streams.cpp), for the
// runtime calls that put work on them -- copies and memsets (memory.cpp), kernel launches
// (scheduler.cpp), cuBLAS (cublas.cpp).
//
// How a queued operation runs depends on RINGGRAD_EMU_STREAMS (cuda_emu/control.h): at once
// (eager), only when something forces it (lazy), or at once, later or in random prefixes (random).
#pragma once

#include <functional>
#include <string>

#include <vector>

#include "cuda_emu/launch.h"
#include "cuda_emu/runtime_api.h"

namespace cuda_emu {

// Queues `work` on `stream` (null: the legacy stream of the current device), after every operation
// queued there before; `what` names it in diagnostics. The stream must exist (stream_device()).
// `accesses` are the allocations it reads and writes, for the happens-before checker (races.h).
void enqueue(cudaStream_t stream, const std::string& what, std::function<void()> work,
             const std::vector<MemoryAccess>& accesses = {});
// The same for work that may have to wait for something outside the emulated GPU (an NCCL peer):
// `step` is called whenever the stream gets to it, must never block, and returns true once the work
// is done. Until then the stream is stuck there, as a GPU's stream is in a collective.
void enqueue_steps(cudaStream_t stream, const std::string& what, std::function<bool()> step,
                   const std::vector<MemoryAccess>& accesses = {});

// Runs everything queued on `stream` so far (and what it waits for): the host waits for it, however
// long a step takes to finish (bounded: past RINGGRAD_EMU_HANG_S, default 600, the emulator stops
// the program, naming what the stream is stuck in, where a GPU would hang).
void drain_stream(cudaStream_t stream);
// Runs everything queued on every stream, of every device: what cudaFree waits for.
void drain_all();

}  // namespace cuda_emu
