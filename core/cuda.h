/// @file
/// core/cuda.h: the CUDA runtime as a user of ringgrad sees it -- device count, synchronisation and
/// the caching allocator's statistics. Free of CUDA types, and present in every build: a CPU-only
/// build reports 0 devices and answers the rest with an Error saying CUDA is not built in.
///
/// Streams: ringgrad queues all work for cuda:k on one stream of its own (created non-blocking, so it
/// never serialises with the legacy default stream). Work is asynchronous; reading a result on the
/// host (item(), to_vector(), .to(Device::cpu())) waits for exactly what it needs. core/cuda.cpp answers
/// through the CUDA backend's device runtime (kernels/backend.h); docs/cuda.md tells the whole story.
#pragma once

#include <memory>

#include <ringgrad/core/base/allocator.h>
#include <ringgrad/core/base/caching_allocator.h>
#include <ringgrad/core/base/device.h>

namespace ringgrad {

/// True when this program has the CUDA backend: ringgrad was configured with CUDA (RINGGRAD_CUDA=ON,
/// or AUTO with nvcc found) and the program links ringgrad::cuda. Whether a GPU is present at run time
/// is cuda_device_count().
bool built_with_cuda();

/// CUDA devices this process can use: 0 without a GPU or driver, and in a program without the CUDA
/// backend. Read once.
int cuda_device_count();
inline bool cuda_is_available() { return cuda_device_count() > 0; }  ///< at least one GPU can be used

/// Waits until all work ringgrad queued on cuda:device has finished (and reports its errors).
void cuda_synchronize(int device);

/// The stream ringgrad queues cuda:device's work on (a cudaStream_t, opaque here): what a library
/// that launches its own CUDA work in order with ringgrad's -- NCCL, say -- waits on or queues after.
Stream cuda_stream(int device);

/// Makes cuda:device the calling thread's current CUDA device for the guard's lifetime and restores
/// the previous one afterwards: CUDA keeps a current device per host thread, and a runtime call made
/// for one GPU (an event, a communicator's launch) goes to whichever device is current. A thread that
/// had no device yet keeps cuda:device: "restoring" cuda:0 would create a CUDA context on GPU 0.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);  ///< makes cuda:device current
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

/// The caching allocator of CUDA tensors (core/base/caching_allocator.h): statistics of one device, and
/// a way to give the cached blocks of every device back to the driver (for other programs, or before
/// measuring memory with nvidia-smi).
MemoryStats cuda_memory_stats(int device);
void cuda_reset_peak_memory_stats(int device);  ///< peak_allocated_bytes = allocated_bytes on cuda:device
void cuda_empty_cache();                        ///< gives every device's cached (free) blocks back to the driver

/// Page-locked (pinned) host memory from cudaHostAlloc, through a caching allocator of its own: the
/// staging buffer for host<->GPU transfers that must run asynchronously (a copy from pageable memory
/// is staged by the driver and cannot overlap compute). The device argument of allocate/deallocate is
/// ignored. The caller must not free a buffer while a copy on a stream may still read or write it.
Allocator& cuda_pinned_allocator();
MemoryStats cuda_pinned_memory_stats();  ///< statistics of cuda_pinned_allocator()

/// Staging copies between CUDA memory and pinned host memory that overlap compute -- what a
/// communication thread needs to move a gradient while backward goes on (the ring backend's staging).
/// They run on a side stream of the device, never on ringgrad's compute stream, and are ordered with
/// the compute stream by events alone, so waiting for one never waits for kernels queued after it:
///
/// @code
///   auto ready = cuda_mark_ready(device);    // caller's thread, right after the producer was queued
///   ... on another thread, later ...
///   cuda_copy_to_pinned(*ready, src, pinned, nbytes);    // waits only for what `ready` marked
///   cuda_copy_from_pinned(*ready, pinned, dst, nbytes);  // later compute-stream work sees dst
/// @endcode
///
/// The memory must stay allocated until the call returns (both wait for their copy), and compute-
/// stream work queued after the ready point must not use the device memory, as with any collective
/// between its call and its wait().
struct CudaReadyPoint;
/// A point in the work queued so far on cuda:device's compute stream.
std::shared_ptr<CudaReadyPoint> cuda_mark_ready(int device);
/// Copies nbytes of device memory (on the ready point's device) to pinned host memory, after the
/// work `ready` marked and nothing later; returns when the bytes are on the host.
void cuda_copy_to_pinned(const CudaReadyPoint& ready, const void* src, void* pinned_dst, int64_t nbytes);
/// Copies nbytes of pinned host memory into device memory of the ready point's device, after the work
/// `after` marked; work queued on the compute stream from now on sees it. Returns when the pinned
/// buffer may be reused.
void cuda_copy_from_pinned(const CudaReadyPoint& after, const void* pinned_src, void* dst, int64_t nbytes);

}  // namespace ringgrad
