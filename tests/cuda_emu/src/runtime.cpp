// tests/cuda_emu/src/runtime.cpp: errors, devices, contexts and peer access of the emulated runtime
// (streams and events are in streams.cpp).
//
// Contexts as CUDA 12 makes them: cudaSetDevice creates the device's primary context (if the process
// has none there yet) and makes it current; any other call that needs one, on a thread with none
// current, creates it on the thread's current device -- cuda:0 for a thread that never chose. That
// second way is how a program ends up with an unintended 0.5 GiB context on GPU 0 in every process;
// the emulator records each context, and with RINGGRAD_EMU_EXCLUSIVE=NAME it holds each device for
// one process at a time (a lock file per device, released when the process ends, however it ends),
// as a GPU in exclusive-process compute mode does: the second process gets cudaErrorDevicesUnavailable.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <cuda.h>

#include "cuda_emu/control.h"
#include "cuda_emu/runtime_api.h"
#include "state.h"

namespace cuda_emu {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_current_device = 0;
thread_local int t_context_device = -1;  // the device whose context is current here; -1: none yet

std::mutex g_handles_mutex;
std::set<int>& g_context_devices = *new std::set<int>();  // guarded by g_handles_mutex; never destroyed
std::set<std::pair<int, int>>& g_peers = *new std::set<std::pair<int, int>>();  // (from, to): `from` may touch `to`
CUctx_st* g_context_handles[16];  // only compared with null: cuCtxGetCurrent's answer per device

bool valid_device(int device) { return device >= 0 && device < device_count(); }

// RINGGRAD_EMU_EXCLUSIVE=NAME: takes cuda:device for this process, or says who cannot have it.
bool take_exclusive(int device, std::string* why) {
  const char* name = std::getenv("RINGGRAD_EMU_EXCLUSIVE");
  if (name == nullptr || *name == '\0') return true;
  std::string safe(name);
  for (char& c : safe)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ringgrad-emu-" + safe +
                           "-cuda" + std::to_string(device) + ".lock";
  // Never closed: the lock is the process's until it ends.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) fatal("RINGGRAD_EMU_EXCLUSIVE: cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
  ::close(fd);
  *why = "cuda:" + std::to_string(device) +
         " already has a context in another process, and RINGGRAD_EMU_EXCLUSIVE=" + name +
         " gives each device to one process (exclusive-process compute mode)";
  return false;
}

// Makes `device`'s primary context current on this thread, creating it if the process has none there.
cudaError_t make_context_current(int device, const char* call) {
  std::unique_lock<std::mutex> lock(g_handles_mutex);
  if (g_context_devices.count(device) == 0) {
    std::string why;
    if (!take_exclusive(device, &why)) {
      lock.unlock();
      return fail(cudaErrorDevicesUnavailable, std::string(call) + ": " + why);
    }
    g_context_devices.insert(device);
  }
  t_context_device = device;
  return cudaSuccess;
}

}  // namespace

cudaError_t use_context(const char* call) {
  if (t_context_device >= 0) return cudaSuccess;
  return make_context_current(t_current_device, call);
}

std::vector<int> context_devices() {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  return std::vector<int>(g_context_devices.begin(), g_context_devices.end());
}

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

bool small_device() {
  static const bool small = [] {
    const char* env = std::getenv("RINGGRAD_EMU_SMALL_DEVICE");
    if (env == nullptr || *env == '\0' || std::string(env) == "0") return false;
    if (std::string(env) == "1") return true;
    fatal("RINGGRAD_EMU_SMALL_DEVICE: expected 0 or 1, got '" + std::string(env) + "'");
  }();
  return small;
}

bool peer_access_enabled(int from, int to) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  return g_peers.count({from, to}) != 0;
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
    CUDA_EMU_NAME(cudaErrorDevicesUnavailable)
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
    case cudaErrorDevicesUnavailable: return "CUDA-capable device(s) is/are busy or unavailable";
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
  if (const cudaError_t e = make_context_current(device, "cudaSetDevice"); e != cudaSuccess) return e;
  t_current_device = device;
  return cudaSuccess;
}

// ---- the driver functions ringgrad asks for -----------------------------------------------------------
namespace {
CUresult emu_cuCtxGetCurrent(CUcontext* context) {
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *context = t_context_device >= 0 ? reinterpret_cast<CUcontext>(&g_context_handles[t_context_device]) : nullptr;
  return CUDA_SUCCESS;
}
CUresult emu_cuDevicePrimaryCtxGetState(CUdevice device, unsigned* flags, int* active) {
  if (flags == nullptr || active == nullptr || !valid_device(device)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  *flags = 0;
  *active = g_context_devices.count(device) != 0 ? 1 : 0;
  return CUDA_SUCCESS;
}
}  // namespace

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || function == nullptr || flags != cudaEnableDefault) return fail(cudaErrorInvalidValue);
  const std::string name(symbol);
  *function = name == "cuCtxGetCurrent"              ? reinterpret_cast<void*>(&emu_cuCtxGetCurrent)
              : name == "cuDevicePrimaryCtxGetState" ? reinterpret_cast<void*>(&emu_cuDevicePrimaryCtxGetState)
                                                     : nullptr;
  if (status != nullptr)
    *status = *function != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
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
  prop->maxThreadsPerMultiProcessor = 2048;
  if (small_device()) {
    // Few SMs and a grid three blocks high and deep: kernels that size their grids from these
    // properties then run every grid-stride loop (over x, y and z) several times in small tests.
    prop->maxGridSize[1] = 3, prop->maxGridSize[2] = 3;
    prop->multiProcessorCount = 1;
    prop->maxThreadsPerMultiProcessor = 256;
  }
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->memoryBusWidth = 6144;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
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

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device) {
  if (can_access == nullptr || !valid_device(device) || !valid_device(peer_device)) return fail(cudaErrorInvalidDevice);
  *can_access = device != peer_device ? 1 : 0;  // emulated H200s are NVLinked
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned flags) {
  if (flags != 0) return fail(cudaErrorInvalidValue);
  if (!valid_device(peer_device) || peer_device == t_current_device) return fail(cudaErrorInvalidDevice);
  if (const cudaError_t e = use_context("cudaDeviceEnablePeerAccess"); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  if (!g_peers.insert({t_current_device, peer_device}).second) return fail(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}
