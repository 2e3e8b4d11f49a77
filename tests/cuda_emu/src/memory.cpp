// tests/cuda_emu/src/memory.cpp: emulated device and pinned memory, and the copies between them.
//
// An allocation is a host allocation of exactly the requested size (aligned to 256 bytes, as
// cudaMalloc's are), so AddressSanitizer reports the first byte a kernel reads or writes past its
// end. Each is registered with its device (or as pinned host memory), which lets every copy be
// checked the way a GPU's copy engines and page tables would refuse it: the direction must match
// where the pointers are, the whole range must lie inside one allocation, and null is never a
// source or a destination of a non-empty copy. A failed check is an error code, as from the real
// runtime, plus a line on stderr that says what was wrong.
//
// Checks happen at the call; the bytes move when the stream runs the copy (streams.cpp), with what a
// GPU's copies do to host memory in between:
//   - from pageable memory to the device: the source is read at the call (CUDA stages it before
//     returning), so the caller may reuse it at once;
//   - from pinned memory: read when the copy runs, so a host write after the call, before the copy
//     is known done, changes what arrives -- as on a GPU;
//   - into pinned memory: the destination reads as NaN (all bytes 0xFF) from the call until the copy
//     runs, so a host read that did not wait sees garbage, not the right answer by luck;
//   - into pageable memory: the call returns when the copy is done (CUDA's rule, too);
//   - pinned memory under a queued copy is protected from the host until the copy runs: read-only
//     while a copy reads it, inaccessible while one writes it (pinned_guard.h), so a host write
//     into a staging buffer still being sent, or a read of a result not yet there, stops the
//     program naming the copy. Pinned buffers start on a page for that.
// The blocking calls (cudaMemcpy, cudaMemset, cudaMemcpyPeer) run on the legacy stream and wait for
// it; cudaFree and cudaFreeHost wait for all queued work, as CUDA's do. Every copy and memset tells
// the happens-before checker (races.h) which allocations it reads and writes; pageable host memory
// is not tracked.
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_emu/runtime_api.h"
#include "pinned_guard.h"
#include "races.h"
#include "state.h"
#include "streams.h"

namespace cuda_emu {
namespace {

std::mutex g_memory_mutex;
// Never destroyed (as every registry here): a program may free memory, or destroy a process group,
// during static destruction, after this file's statics would be gone.
std::map<uintptr_t, Region>& g_regions = *new std::map<uintptr_t, Region>();  // by base address
size_t g_device_bytes[16] = {};

constexpr size_t kAlignment = 256;
constexpr size_t kPinnedAlignment = 4096;
constexpr size_t kDeviceCapacity = size_t{143771} << 20;  // an H200's memory, as cudaGetDeviceProperties says

std::string describe(const void* p) {
  Region r;
  if (p == nullptr) return "null";
  if (!find_region(p, 0, &r)) return "pageable host memory";
  return r.device >= 0 ? "memory of cuda:" + std::to_string(r.device) : "pinned host memory";
}

// Where the bytes [p, p + n) are: 'd' device, 'h' host (pinned or pageable), 'x' partly outside
// the allocation that holds p.
char locate(const void* p, size_t n) {
  Region r;
  if (find_region(p, n, &r)) return r.device >= 0 ? 'd' : 'h';
  if (is_registered(p)) return 'x';
  return 'h';
}

bool is_pinned(const void* p) {
  Region r;
  return find_region(p, 0, &r) && r.device < 0;
}

// Checks a copy, then queues it on `stream` with the host-memory rules above; `blocking`: the call
// returns once the stream has run it.
cudaError_t checked_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool blocking,
                         const char* call) {
  if (const cudaError_t e = use_context(call); e != cudaSuccess) return e;
  if (n == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr)
    return fail(cudaErrorInvalidValue, std::string(call) + " of " + std::to_string(n) + " bytes from " + describe(src) +
                                           " to " + describe(dst));
  const char d = locate(dst, n), s = locate(src, n);
  if (d == 'x' || s == 'x')
    return fail(cudaErrorInvalidValue, std::string(call) + " of " + std::to_string(n) + " bytes runs past the end of " +
                                           (d == 'x' ? "the destination" : "the source") + " allocation");
  const char want_src = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost ? 'h' : 'd';
  const char want_dst = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost ? 'h' : 'd';
  if (kind != cudaMemcpyDefault && (s != want_src || d != want_dst))
    return fail(cudaErrorInvalidValue, std::string(call) + ": the kind says " + (want_src == 'd' ? "device" : "host") +
                                           " to " + (want_dst == 'd' ? "device" : "host") + ", but it copies " +
                                           describe(src) + " to " + describe(dst));
  const std::string what =
      std::string(call) + " of " + std::to_string(n) + " bytes from " + describe(src) + " to " + describe(dst);
  // CUDA's copies require disjoint memory areas: a GPU's copy engine moves overlapping ones in an
  // order of its own, so the result is undefined (memmove here would hide that).
  const char* const first_dst = static_cast<const char*>(dst);
  const char* const first_src = static_cast<const char*>(src);
  if (first_dst < first_src + n && first_src < first_dst + n)
    return fail(cudaErrorInvalidValue,
                what + ": the source and destination overlap, which a GPU's copy leaves undefined");
  if (s == 'h' && d == 'h') {
    std::memmove(dst, src, n);  // host to host: no stream involved
  } else if (s == 'h' && !is_pinned(src)) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    enqueue(stream, what, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); }, {{dst, true}});
  } else {
    uint64_t guard = 0;
    const void* pinned = nullptr;  // the pinned side, if any
    if (s == 'h') {                // pinned: the host may still read it, not write it
      pinned = src;
      guard = guard_pinned(src, n, /*writes=*/false, what);
    }
    if (d == 'h' && is_pinned(dst)) {
      pinned = dst;
      unguarded(dst, n, 0, [&] { std::memset(dst, 0xFF, n); });  // NaN until the copy has run
      guard = guard_pinned(dst, n, /*writes=*/true, what);
    }
    enqueue(stream, what,
            [dst, src, n, guard, pinned] {
              if (pinned == nullptr) {
                std::memmove(dst, src, n);
              } else {
                unguarded(pinned, n, guard, [&] { std::memmove(dst, src, n); });
              }
            },
            {{src, false}, {dst, true}});
    if (d == 'h' && !is_pinned(dst)) blocking = true;
  }
  if (blocking) drain_stream(stream);
  return cudaSuccess;
}

cudaError_t allocate(void** ptr, size_t bytes, int device, const char* call) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (const cudaError_t e = use_context(call); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(g_memory_mutex);
    if (device >= 0 && (bytes > kDeviceCapacity || g_device_bytes[device] > kDeviceCapacity - bytes))
      return fail(cudaErrorMemoryAllocation);
  }
  // posix_memalign keeps the exact size (aligned_alloc would want a multiple of the alignment),
  // so ASan's redzone starts at the first byte past the allocation. Pinned memory starts on a page,
  // so its guards (pinned_guard.h) cover it from the first byte.
  void* p = nullptr;
  if (posix_memalign(&p, device >= 0 ? kAlignment : kPinnedAlignment, bytes) != 0 || p == nullptr)
    return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(g_memory_mutex);
  g_regions[reinterpret_cast<uintptr_t>(p)] = Region{reinterpret_cast<uintptr_t>(p), bytes, device};
  if (device >= 0) g_device_bytes[device] += bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t release(void* ptr, bool pinned, const char* call) {
  if (const cudaError_t e = use_context(call); e != cudaSuccess) return e;  // cudaFree(0) too: CUDA's idiom
  if (ptr == nullptr) return cudaSuccess;
  drain_all();  // nothing queued may still use it
  std::unique_lock<std::mutex> lock(g_memory_mutex);
  const auto it = g_regions.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_regions.end() || (it->second.device < 0) != pinned) {
    lock.unlock();
    return fail(cudaErrorInvalidValue, std::string(call) + " of a pointer it did not allocate");
  }
  if (it->second.device >= 0) g_device_bytes[it->second.device] -= it->second.bytes;
  g_regions.erase(it);
  lock.unlock();
  forget_accesses(ptr);
  std::free(ptr);
  return cudaSuccess;
}

}  // namespace

bool find_region(const void* ptr, size_t bytes, Region* region) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_memory_mutex);
  auto it = g_regions.upper_bound(p);
  if (it == g_regions.begin()) return false;
  --it;
  const Region& r = it->second;
  if (p < r.base || p > r.base + r.bytes || (bytes > 0 && (p == r.base + r.bytes || bytes > r.base + r.bytes - p)))
    return false;
  *region = r;
  return true;
}

bool is_registered(const void* ptr) {
  Region r;
  return find_region(ptr, 0, &r);
}

}  // namespace cuda_emu

using namespace cuda_emu;

cudaError_t cudaMalloc(void** ptr, size_t bytes) { return allocate(ptr, bytes, current_device(), "cudaMalloc"); }
cudaError_t cudaFree(void* ptr) { return release(ptr, false, "cudaFree"); }
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  if (flags & ~cudaHostAllocPortable) return fail(cudaErrorInvalidValue, "cudaHostAlloc: flags not emulated");
  return allocate(ptr, bytes, -1, "cudaHostAlloc");
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return allocate(ptr, bytes, -1, "cudaMallocHost"); }
cudaError_t cudaFreeHost(void* ptr) { return release(ptr, true, "cudaFreeHost"); }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = use_context("cudaMemGetInfo"); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(g_memory_mutex);
  *total_bytes = kDeviceCapacity;
  *free_bytes = kDeviceCapacity - g_device_bytes[current_device()];
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return fail(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{cudaMemoryTypeUnregistered, -1, nullptr, nullptr};
  Region r;
  if (ptr == nullptr || !find_region(ptr, 0, &r)) return cudaSuccess;  // pageable: not an error (CUDA >= 11)
  attributes->type = r.device >= 0 ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
  attributes->device = r.device >= 0 ? r.device : current_device();
  attributes->devicePointer = const_cast<void*>(ptr);
  attributes->hostPointer = r.device >= 0 ? nullptr : const_cast<void*>(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind) {
  return checked_copy(dst, src, bytes, kind, nullptr, true, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream) {
  int device = 0;
  if (!stream_device(stream, &device))
    return fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync on a stream that does not exist");
  return checked_copy(dst, src, bytes, kind, stream, false, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
  const cudaError_t e = cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, nullptr);
  if (e == cudaSuccess) drain_stream(nullptr);
  return e;
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
  int device = 0;
  if (const cudaError_t e = use_context("cudaMemcpyPeerAsync"); e != cudaSuccess) return e;
  if (!stream_device(stream, &device)) return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  Region d, s;
  if (!find_region(dst, bytes, &d) || d.device != dst_device || !find_region(src, bytes, &s) || s.device != src_device)
    return fail(cudaErrorInvalidValue, "cudaMemcpyPeerAsync of " + std::to_string(bytes) + " bytes: expected " +
                                           std::to_string(bytes) + " bytes of cuda:" + std::to_string(src_device) +
                                           " to cuda:" + std::to_string(dst_device) + ", got " + describe(src) +
                                           " to " + describe(dst));
  enqueue(stream,
          "cudaMemcpyPeerAsync of " + std::to_string(bytes) + " bytes from cuda:" + std::to_string(src_device) +
              " to cuda:" + std::to_string(dst_device),
          [dst, src, bytes] { std::memmove(dst, src, bytes); }, {{src, false}, {dst, true}});
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(ptr, value, bytes, nullptr);
  if (e == cudaSuccess) drain_stream(nullptr);
  return e;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  int device = 0;
  if (const cudaError_t e = use_context("cudaMemsetAsync"); e != cudaSuccess) return e;
  if (!stream_device(stream, &device)) return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  Region r;
  if (!find_region(ptr, bytes, &r) || r.device < 0)
    return fail(cudaErrorInvalidValue, "cudaMemset of " + std::to_string(bytes) + " bytes of " + describe(ptr) +
                                           (is_registered(ptr) ? " runs past the end of its allocation" : ""));
  enqueue(stream, "cudaMemset of " + std::to_string(bytes) + " bytes of " + describe(ptr),
          [ptr, value, bytes] { std::memset(ptr, value, bytes); }, {{ptr, true}});
  return cudaSuccess;
}
