// tests/cuda_emu/src/runtime.cpp: errors, devices, streams and events of the emulated runtime.
//
// Every stream runs its work when it is queued, so "queued" and "done" coincide: synchronising is
// free, an event is complete as soon as it is recorded, and a stream waiting for an event has
// nothing to wait for. What is still checked is what a GPU checks: handles that exist, a stream
// and an event of the same device, timing only on events created with timing.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "cuda_emu/runtime_api.h"
#include "state.h"

struct CUstream_st {
  int device;
  unsigned flags;
};

struct CUevent_st {
  int device;
  unsigned flags;
  bool recorded;
  double ms;  // host time of the record, in milliseconds
};

namespace cuda_emu {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_current_device = 0;

std::mutex g_handles_mutex;
std::set<const CUstream_st*> g_streams;
std::set<const CUevent_st*> g_events;
std::set<std::pair<int, int>> g_peers;  // (from, to): `from`'s kernels may touch `to`'s memory

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

bool live_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  return e != nullptr && g_events.count(e) != 0;
}

bool valid_device(int device) { return device >= 0 && device < device_count(); }

}  // namespace

void fatal(const std::string& what) {
  std::fprintf(stderr, "ringgrad CUDA emulator: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

cudaError_t fail(cudaError_t error) {
  if (error != cudaSuccess) t_last_error = error;
  return error;
}

cudaError_t fail(cudaError_t error, const std::string& why) {
  std::fprintf(stderr, "ringgrad CUDA emulator: %s: %s\n", cudaGetErrorName(error), why.c_str());
  return fail(error);
}

int device_count() {
  static const int count = [] {
    const char* env = std::getenv("RINGGRAD_EMU_DEVICES");
    if (env == nullptr || *env == '\0') return 2;
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end != '\0' || n < 0 || n > 16) fatal("RINGGRAD_EMU_DEVICES: expected 0..16, got '" + std::string(env) + "'");
    return static_cast<int>(n);
  }();
  return count;
}

int current_device() { return t_current_device; }

bool peer_access_enabled(int from, int to) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  return g_peers.count({from, to}) != 0;
}

bool stream_device(cudaStream_t stream, int* device) {
  if (stream == nullptr) {
    *device = t_current_device;
    return true;
  }
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  if (g_streams.count(stream) == 0) return false;
  *device = stream->device;
  return true;
}

}  // namespace cuda_emu

using namespace cuda_emu;

// ---- errors -----------------------------------------------------------------------------------------
cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return t_last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define CUDA_EMU_NAME(e) \
  case e: return #e;
    CUDA_EMU_NAME(cudaSuccess)
    CUDA_EMU_NAME(cudaErrorInvalidValue)
    CUDA_EMU_NAME(cudaErrorMemoryAllocation)
    CUDA_EMU_NAME(cudaErrorInitializationError)
    CUDA_EMU_NAME(cudaErrorCudartUnloading)
    CUDA_EMU_NAME(cudaErrorInvalidConfiguration)
    CUDA_EMU_NAME(cudaErrorInvalidDevicePointer)
    CUDA_EMU_NAME(cudaErrorInvalidMemcpyDirection)
    CUDA_EMU_NAME(cudaErrorStubLibrary)
    CUDA_EMU_NAME(cudaErrorInsufficientDriver)
    CUDA_EMU_NAME(cudaErrorNoDevice)
    CUDA_EMU_NAME(cudaErrorInvalidDevice)
    CUDA_EMU_NAME(cudaErrorInvalidResourceHandle)
    CUDA_EMU_NAME(cudaErrorNotReady)
    CUDA_EMU_NAME(cudaErrorIllegalAddress)
    CUDA_EMU_NAME(cudaErrorPeerAccessAlreadyEnabled)
    CUDA_EMU_NAME(cudaErrorPeerAccessNotEnabled)
    CUDA_EMU_NAME(cudaErrorLaunchFailure)
#undef CUDA_EMU_NAME
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorPeerAccessNotEnabled: return "peer access has not been enabled";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return "unknown error";
  }
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) { return cudaRuntimeGetVersion(version); }

// ---- devices --------------------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = device_count();
  return device_count() > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = t_current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + ")");
  t_current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "NVIDIA H200 (ringgrad CUDA emulator)");
  prop->totalGlobalMem = size_t{143771} << 20;  // 140.4 GiB, what an H200 reports
  prop->sharedMemPerBlock = 48 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024, prop->maxThreadsDim[1] = 1024, prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647, prop->maxGridSize[1] = 65535, prop->maxGridSize[2] = 65535;
  prop->major = 9, prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->memoryBusWidth = 6144;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->maxThreadsPerMultiProcessor = 2048;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  cudaDeviceProp p;
  if (const cudaError_t e = cudaGetDeviceProperties(&p, device); e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); return cudaSuccess;
    case cudaDevAttrWarpSize: *value = p.warpSize; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute not emulated");
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device) {
  if (can_access == nullptr || !valid_device(device) || !valid_device(peer_device)) return fail(cudaErrorInvalidDevice);
  *can_access = device != peer_device ? 1 : 0;  // emulated H200s are NVLinked
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned flags) {
  if (flags != 0) return fail(cudaErrorInvalidValue);
  if (!valid_device(peer_device) || peer_device == t_current_device) return fail(cudaErrorInvalidDevice);
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  if (!g_peers.insert({t_current_device, peer_device}).second) return fail(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

// ---- streams ------------------------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return fail(cudaErrorInvalidValue);
  auto* s = new CUstream_st{t_current_device, flags};
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  g_streams.insert(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  if (stream == nullptr || g_streams.erase(stream) == 0) return fail(cudaErrorInvalidResourceHandle);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  int device = 0;
  return stream_device(stream, &device) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  int device = 0;
  if (!stream_device(stream, &device) || !live_event(event)) return fail(cudaErrorInvalidResourceHandle);
  return flags == 0 ? cudaSuccess : fail(cudaErrorInvalidValue);
}

// ---- events -----------------------------------------------------------------------------------------------
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (event == nullptr || (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming)) != 0)
    return fail(cudaErrorInvalidValue);
  auto* e = new CUevent_st{t_current_device, flags, false, 0.0};
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  g_events.insert(e);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  if (event == nullptr || g_events.erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  int device = 0;
  if (!live_event(event) || !stream_device(stream, &device)) return fail(cudaErrorInvalidResourceHandle);
  if (device != event->device)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: an event of cuda:" + std::to_string(event->device) +
                                                    " recorded on a stream of cuda:" + std::to_string(device));
  event->recorded = true;
  event->ms = now_ms();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return live_event(event) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) { return cudaEventQuery(event); }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return fail(cudaErrorInvalidValue);
  if (!live_event(start) || !live_event(end)) return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = static_cast<float>(end->ms - start->ms);
  return cudaSuccess;
}
