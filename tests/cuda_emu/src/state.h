// tests/cuda_emu/src/state.h: what the emulator's runtime (runtime.cpp, memory.cpp) and its
// scheduler (scheduler.cpp) share -- devices, streams, the memory registry, errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda_emu/runtime_api.h"

namespace cuda_emu {

// Prints "ringgrad CUDA emulator: <what>" and aborts: a fault a GPU would turn into a dead context.
[[noreturn]] void fatal(const std::string& what);

// Records `error` as this host thread's last error (unless it is cudaSuccess) and returns it.
cudaError_t fail(cudaError_t error);
// Prints why a call failed, then fail(error): the runtime's errors say only their code, the
// emulator also says what was wrong.
cudaError_t fail(cudaError_t error, const std::string& why);

int device_count();
int current_device();
// Whether `text` is "random" or "random:SEED" (then *seed = SEED), as RINGGRAD_EMU_SCHEDULE and
// RINGGRAD_EMU_STREAMS spell a random choice.
bool parse_random(const std::string& text, uint64_t* seed);
// RINGGRAD_EMU_SMALL_DEVICE=1: every device reports one SM of 256 threads and a maximum grid of
// (2^31-1) x 3 x 3.
bool small_device();
// Makes sure this thread has a current context (creating one on its current device, as the CUDA
// runtime does lazily); every call that needs one calls this first. Returns the error to return.
cudaError_t use_context(const char* call);
bool peer_access_enabled(int from_device, int to_device);

// Whether `stream` is null (the legacy stream of the current device) or a live stream; its device.
bool stream_device(cudaStream_t stream, int* device);

// One registered allocation: device memory (device >= 0) or pinned host memory (device == -1).
struct Region {
  uintptr_t base = 0;
  size_t bytes = 0;
  int device = -1;
};
// The allocation holding [ptr, ptr + bytes) -- bytes may be 0, then ptr may be one past the end.
bool find_region(const void* ptr, size_t bytes, Region* region);
// Whether any allocation holds ptr at all.
bool is_registered(const void* ptr);

}  // namespace cuda_emu
