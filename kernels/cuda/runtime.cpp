// kernels/cuda/runtime.cpp: device count, the current-device guard, per-device streams, events and
// peer access (kernels/cuda/runtime.h explains why each exists).
//
// Plain C++ against the CUDA runtime API: nothing here runs on the GPU, so nvcc is not needed.
#include "kernels/cuda/runtime.h"

#include <cuda.h>  // the driver's types only: its functions are reached through the runtime, so no -lcuda

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <ringgrad/core/base/error.h>
#include "kernels/cuda/cuda_backend.h"

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

int query_device_count() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  switch (err) {
    case cudaSuccess: return count;
    // No GPU, no driver, or only the driver's stub library: "no device", not a failure, so a CUDA
    // build still loads and runs its CPU work on such a machine.
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary: (void)cudaGetLastError(); return 0;
    default: RINGGRAD_CUDA_CHECK(err); return 0;
  }
}

// The two driver functions that say where contexts are, which the runtime API does not: the runtime
// answers cudaGetDevice with 0 on a thread that never chose a device, and cannot tell that thread from
// one that chose cuda:0. Looked up once; null where the driver lacks them (then no context is assumed).
struct DriverQueries {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*primary_ctx_get_state)(CUdevice, unsigned*, int*) = nullptr;
};

const DriverQueries& driver_queries() {
  static const DriverQueries queries = [] {
    DriverQueries q;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      q.ctx_get_current = reinterpret_cast<CUresult (*)(CUcontext*)>(fn);
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      q.primary_ctx_get_state = reinterpret_cast<CUresult (*)(CUdevice, unsigned*, int*)>(fn);
    (void)cudaGetLastError();
    return q;
  }();
  return queries;
}

// One slot per device, allocated once. The stream pointer is atomic so that the hot path
// (stream_for and device_of on every op) reads it without a lock; creation takes the mutex.
struct DeviceSlots {
  explicit DeviceSlots(int n)
      : streams(new std::atomic<cudaStream_t>[static_cast<size_t>(n)]),
        copy_streams(new std::atomic<cudaStream_t>[static_cast<size_t>(n)]),
        count(n) {
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) streams[i].store(nullptr), copy_streams[i].store(nullptr);
  }
  std::unique_ptr<std::atomic<cudaStream_t>[]> streams;
  std::unique_ptr<std::atomic<cudaStream_t>[]> copy_streams;
  int count;
  std::mutex create_mutex;
};

DeviceSlots& slots() {
  // Never destroyed: streams must outlive every tensor, including those freed during static destruction.
  static auto* s = new DeviceSlots(device_count());
  return *s;
}

}  // namespace

int device_count() {
  static const int count = query_device_count();
  return count;
}

void check_device(int device, const char* op) {
  const int n = device_count();
  RINGGRAD_CHECK(n > 0, op,
                 ": no CUDA GPU is visible to this process (no GPU, no driver, or CUDA_VISIBLE_DEVICES "
                 "hides them); this build has the CUDA backend, so the same program runs where there is one");
  RINGGRAD_CHECK(device >= 0 && device < n, op, ": expected a device in cuda:0..cuda:", n - 1, " (", n,
                 n == 1 ? " GPU" : " GPUs", " visible), got cuda:", device);
}

int current_context_device() {
  const DriverQueries& q = driver_queries();
  CUcontext context = nullptr;
  if (q.ctx_get_current == nullptr || q.ctx_get_current(&context) != CUDA_SUCCESS || context == nullptr) return -1;
  int device = -1;
  RINGGRAD_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

int device_for_host_call() {
  const int current = current_context_device();
  if (current >= 0) return current;
  const DriverQueries& q = driver_queries();
  for (int d = 0; d < device_count() && q.primary_ctx_get_state != nullptr; ++d) {
    unsigned flags = 0;
    int active = 0;
    if (q.primary_ctx_get_state(d, &flags, &active) == CUDA_SUCCESS && active) return d;
  }
  return 0;
}

int exchange_device(int device) {
  const int previous = current_context_device();
  if (previous != device) RINGGRAD_CUDA_CHECK(cudaSetDevice(device));
  return previous;
}

CudaDeviceGuard::CudaDeviceGuard(int device) {
  const int previous = exchange_device(device);
  if (previous != device) previous_ = previous;  // -1 (no context before): the thread keeps `device`
}

CudaDeviceGuard::~CudaDeviceGuard() {
  // A destructor must not throw; restoring a device that was current a moment ago does not fail.
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

namespace {
// The stream in `slot`, created (non-blocking, on `device`) by the first caller.
cudaStream_t stream_in(std::atomic<cudaStream_t>& slot, int device) {
  cudaStream_t stream = slot.load(std::memory_order_acquire);
  if (stream != nullptr) return stream;
  std::lock_guard<std::mutex> lock(slots().create_mutex);
  stream = slot.load(std::memory_order_acquire);
  if (stream == nullptr) {
    CudaDeviceGuard guard(device);
    RINGGRAD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    slot.store(stream, std::memory_order_release);
  }
  return stream;
}
}  // namespace

cudaStream_t stream_for(int device) {
  check_device(device, "stream_for");
  return stream_in(slots().streams[static_cast<size_t>(device)], device);  // checked: 0 <= device
}

cudaStream_t copy_stream_for(int device) {
  check_device(device, "copy_stream_for");
  return stream_in(slots().copy_streams[static_cast<size_t>(device)], device);
}

int device_of(cudaStream_t stream, const char* op) {
  if (stream != nullptr && device_count() > 0) {
    DeviceSlots& s = slots();
    for (int d = 0; d < s.count; ++d)
      if (s.streams[static_cast<size_t>(d)].load(std::memory_order_acquire) == stream) return d;
  }
  throw Error(detail::str(op, ": expected a stream of the CUDA backend (Backend::stream_for(device)), got ",
                          stream == nullptr ? std::string("the null stream") : detail::str(static_cast<void*>(stream)),
                          "; ringgrad never queues work on the legacy default stream"));
}

void synchronize(int device) {
  const cudaStream_t stream = stream_for(device);
  CudaDeviceGuard guard(device);
  RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(stream));
}

Event::Event(int device) : device_(device) {
  CudaDeviceGuard guard(device);
  RINGGRAD_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

Event::~Event() {
  // Destroying an event whose record or waits are still pending is allowed: the driver releases it
  // once they complete.
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream) {
  CudaDeviceGuard guard(device_);  // an event is recorded on a stream of the device it was created on
  RINGGRAD_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::wait_in(cudaStream_t stream) const { RINGGRAD_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }

int64_t DeviceLimits::busy_blocks(int threads) const {
  const int64_t per_sm = std::max<int64_t>(1, threads_per_sm / std::max(1, threads));
  return std::min<int64_t>(max_grid[0], std::max<int64_t>(1, int64_t{sms} * per_sm * 4));
}

const DeviceLimits& device_limits(int device) {
  check_device(device, "device_limits");
  static std::mutex mutex;
  static auto* known = new std::map<int, DeviceLimits>();  // never destroyed: kernels may launch at exit
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = known->find(device);
  if (it != known->end()) return it->second;
  cudaDeviceProp prop{};
  RINGGRAD_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceLimits limits;
  limits.sms = std::max(1, prop.multiProcessorCount);
  limits.threads_per_sm = std::max(1, prop.maxThreadsPerMultiProcessor);
  for (int d = 0; d < 3; ++d) limits.max_grid[d] = std::max(1, prop.maxGridSize[d]);
  return known->emplace(device, limits).first->second;  // std::map: references stay valid
}

const DeviceLimits& current_device_limits() {
  int device = 0;
  RINGGRAD_CUDA_CHECK(cudaGetDevice(&device));
  // Every launch asks: each thread keeps the answers it has had, so the hot path takes no lock.
  thread_local const DeviceLimits* known[64] = {};
  if (device < 0 || device >= 64) return device_limits(device);
  if (known[device] == nullptr) known[device] = &device_limits(device);  // std::map: the address stays
  return *known[device];
}

bool can_access_peer(int dst_device, int src_device) {
  static std::mutex mutex;
  static auto* known = new std::map<std::pair<int, int>, bool>();
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(dst_device, src_device);
  if (const auto it = known->find(key); it != known->end()) return it->second;
  int can = 0;
  RINGGRAD_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, dst_device, src_device));
  if (can) {
    CudaDeviceGuard guard(dst_device);
    const cudaError_t err = cudaDeviceEnablePeerAccess(src_device, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // enabled by someone else in this process: fine
    } else {
      RINGGRAD_CUDA_CHECK(err);
    }
  }
  (*known)[key] = can != 0;
  return can != 0;
}

}  // namespace cuda

int CudaBackend::device_count() { return cuda::device_count(); }

void CudaBackend::synchronize(int device) {
  cuda::check_device(device, "cuda_synchronize");
  cuda::synchronize(device);
}

int CudaBackend::exchange_current_device(int device) {
  cuda::check_device(device, "CudaDeviceGuard");
  return cuda::exchange_device(device);
}

}  // namespace kernels
}  // namespace ringgrad
