// kernels/cuda/runtime.h: the CUDA runtime pieces the backend stands on -- the device count, a guard
// that makes a device current for a scope, one ringgrad stream per device, events, and peer access.
//
// Why a guard: CUDA keeps a "current device" per host thread; every cudaMalloc, launch and stream
// belongs to it. ringgrad runs work for different GPUs from the same threads (and the autograd engine
// from device workers), so each backend call makes the device of its stream current and restores the
// previous one afterwards, instead of trusting whatever the thread last set.
//
// What it never restores is "no device": a thread that has no context yet (a rank's main thread
// before its first GPU call, a communication thread, a watchdog) reads as cuda:0 through
// cudaGetDevice, and making cuda:0 current again would create a primary context there -- about
// 0.5 GiB of GPU 0 in every process of a job, and a failure on a GPU in exclusive-process mode. Such
// a thread keeps the guard's device afterwards, as it would after cudaSetDevice.
//
// Why one stream per device: work on one stream runs in order, which is what makes the caching
// allocator's reuse safe (core/base/caching_allocator.h) and copies correctly ordered after the kernels
// that produce their source. It is created with cudaStreamNonBlocking so it never waits for, or
// holds up, the legacy default stream that other libraries in the process may use.
// Private to the library: needs the CUDA toolkit's headers.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include <ringgrad/core/base/device.h>
#include <ringgrad/core/base/error.h>
#include "core/base/cuda_check.h"

namespace ringgrad {
namespace kernels {
namespace cuda {

// Same as ringgrad::cuda_device_count() (core/cuda.h): 0 without a GPU or driver, read once.
int device_count();

// Throws ringgrad::Error naming `op` unless 0 <= device < device_count().
void check_device(int device, const char* op);

// The device whose context is current on the calling thread, or -1 when none is (asked of the
// driver: the runtime cannot tell "none" from cuda:0).
int current_context_device();
// A device to make host-side runtime calls on (cudaHostAlloc) without creating a context: the
// thread's, else the first that has a primary context in this process, else cuda:0.
int device_for_host_call();
// Makes `device` current (creating its primary context if needed) and returns the device whose
// context was current before, or -1 when none was.
int exchange_device(int device);

// Makes `device` current for the guard's lifetime; restores the previous device afterwards, unless
// the thread had none (then it keeps `device`).
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

// ringgrad's stream on `device`, created (non-blocking) on first use and kept for the process.
cudaStream_t stream_for(int device);
// A second non-blocking stream per device, for staging copies that must overlap the compute stream
// (core/cuda.h: cuda_copy_to_pinned); ordered with it by events only. Created on first use.
cudaStream_t copy_stream_for(int device);
// The device of a stream returned by stream_for(); throws ringgrad::Error naming `op` for any other
// stream, the legacy default stream (null) included.
int device_of(cudaStream_t stream, const char* op);
// Waits for everything queued on ringgrad's stream of `device`.
void synchronize(int device);

// Runs fn(stream, device) with the stream's device current. An Error from the launcher gains the
// device ("softmax: ... got int64 (on cuda:1)") unless it already names it.
template <typename Fn>
void on_stream(const char* op, Stream s, Fn&& fn) {
  const auto stream = static_cast<cudaStream_t>(s);
  const int device = device_of(stream, op);
  CudaDeviceGuard guard(device);
  try {
    fn(stream, device);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("cuda:") != std::string::npos) throw;
    throw Error(detail::str(what, " (on cuda:", device, ")"));
  }
}

// A CUDA event (no timing) created on `device`: record() marks a point in a stream of that device,
// and wait_in() makes another stream -- of any device -- wait for that point without blocking the host.
class Event {
 public:
  explicit Event(int device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t stream);
  void wait_in(cudaStream_t stream) const;

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

// The limits a launch must respect, from the device's properties: every kernel sizes its grid from
// here, never from constants, so a device with fewer SMs or a smaller grid (the kernel emulator's
// small-device mode) makes every grid-stride and block loop run several trips.
struct DeviceLimits {
  int sms = 1;                      // streaming multiprocessors
  int threads_per_sm = 2048;        // resident threads per SM
  int64_t max_grid[3] = {1, 1, 1};  // gridDim.x, .y, .z
  // Blocks of `threads` that keep every SM busy several times over (grid-stride loops cover more).
  int64_t busy_blocks(int threads) const;
};
// The limits of `device` (read once per device), and of the current device.
const DeviceLimits& device_limits(int device);
const DeviceLimits& current_device_limits();

// Whether `dst_device` can read and write `src_device`'s memory directly (NVLink or PCIe P2P); the
// first query for a pair also enables that access. Cached per pair.
bool can_access_peer(int dst_device, int src_device);

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
