// core/cuda.h: the CUDA runtime as a user of ringgrad sees it -- device count, synchronisation and
// the caching allocator's statistics. Free of CUDA types, and present in every build: a CPU-only
// build reports 0 devices and answers the rest with an Error saying CUDA is not built in.
//
// Streams: ringgrad queues all work for cuda:k on one stream of its own (created non-blocking, so it
// never serialises with the legacy default stream). Work is asynchronous; reading a result on the
// host (item(), to_vector(), .to(Device::cpu())) waits for exactly what it needs. The implementation
// lives in kernels/cuda/ (runtime.cpp, memory.cpp); docs/cuda.md tells the whole story.
#pragma once

#include "core/caching_allocator.h"
#include "core/storage.h"

namespace ringgrad {

// CUDA devices this process can use: 0 without a GPU or driver, and in a CPU-only build. Read once.
int cuda_device_count();
inline bool cuda_is_available() { return cuda_device_count() > 0; }

// Waits until all work ringgrad queued on cuda:device has finished (and reports its errors).
void cuda_synchronize(int device);

// The caching allocator of CUDA tensors (core/caching_allocator.h): statistics of one device, and
// a way to give the cached blocks of every device back to the driver (for other programs, or before
// measuring memory with nvidia-smi).
MemoryStats cuda_memory_stats(int device);
void cuda_reset_peak_memory_stats(int device);
void cuda_empty_cache();

// Page-locked (pinned) host memory from cudaHostAlloc, through a caching allocator of its own: the
// staging buffer for host<->GPU transfers that must run asynchronously (a copy from pageable memory
// is staged by the driver and cannot overlap compute). The device argument of allocate/deallocate is
// ignored. The caller must not free a buffer while a copy on a stream may still read or write it.
Allocator& cuda_pinned_allocator();
MemoryStats cuda_pinned_memory_stats();

}  // namespace ringgrad
