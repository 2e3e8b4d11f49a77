// core/base/caching_allocator.cpp: rounding, best-fit reuse per (device, stream), statistics, and the
// empty-the-cache-and-retry answer to running out of memory. The header explains the design.
#include <ringgrad/core/base/caching_allocator.h>

#include <algorithm>
#include <climits>
#include <vector>

#include <ringgrad/core/base/error.h>

namespace ringgrad {

CachingAllocator::CachingAllocator(RawMemory& raw, DeviceKind kind, StreamOf stream_of)
    : raw_(raw), kind_(kind), stream_of_(std::move(stream_of)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked(-1);
  // Blocks still in use belong to tensors that outlive the allocator, which is a bug in the caller;
  // returning them too at least keeps the raw allocator's books balanced.
  for (auto& [ptr, block] : in_use_) raw_.raw_free(ptr, block.device);
  in_use_.clear();
}

int64_t CachingAllocator::round_size(int64_t nbytes) {
  RINGGRAD_CHECK(nbytes >= 0 && nbytes <= INT64_MAX - kLargeGranuleBytes,
                 "caching allocator: expected a byte count in [0, 2^63 - 2 MiB], got ", nbytes);
  const int64_t granule = nbytes <= kSmallLimitBytes ? kGranuleBytes : kLargeGranuleBytes;
  return std::max<int64_t>(granule, (nbytes + granule - 1) / granule * granule);
}

void* CachingAllocator::allocate(int64_t nbytes, Device device) {
  return allocate_on(nbytes, device.index, stream_of_ ? stream_of_(device.index) : nullptr);
}

void CachingAllocator::deallocate(void* ptr, int64_t, Device) { free(ptr); }

void* CachingAllocator::allocate_on(int64_t nbytes, int device, Stream stream) {
  if (nbytes == 0) return nullptr;
  const int64_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats& st = stats_[device];

  Block block;
  Pool& pool = free_[PoolKey{device, stream}];
  const auto fit = pool.lower_bound(size);  // the smallest free block of at least `size` bytes
  if (fit != pool.end() && fit->first <= 2 * size) {
    block = fit->second;
    pool.erase(fit);
  } else {
    block.ptr = raw_alloc_locked(size, device, nbytes);
    block.size = size;
    block.device = device;
    block.stream = stream;
  }
  in_use_.emplace(block.ptr, block);
  st.allocated_bytes += block.size;
  st.peak_allocated_bytes = std::max(st.peak_allocated_bytes, st.allocated_bytes);
  return block.ptr;
}

void* CachingAllocator::raw_alloc_locked(int64_t size, int device, int64_t requested) {
  MemoryStats& st = stats_[device];
  void* ptr = raw_.raw_alloc(size, device);
  if (ptr == nullptr) {
    // Out of memory, perhaps only because the cache holds it: give the cache back, then try once more.
    ++st.oom_retry_count;
    release_cached_locked(device);
    ptr = raw_.raw_alloc(size, device);
  }
  RINGGRAD_CHECK(ptr != nullptr, "out of memory on ", Device{kind_, device}, ": tried to allocate ", requested,
                 " bytes (", size, " after rounding); ", st.allocated_bytes, " bytes are allocated to tensors and ",
                 st.reserved_bytes,
                 " reserved by ringgrad's caching allocator, whose cache was already emptied. "
                 "Free tensors you no longer need (drop their handles) or use a smaller batch");
  ++st.raw_alloc_count;
  st.reserved_bytes += size;
  return ptr;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = in_use_.find(ptr);
  RINGGRAD_CHECK(it != in_use_.end(), "caching allocator: free of ", ptr,
                 ", which is not a block in use (freed twice, or not from this allocator)");
  const Block block = it->second;
  in_use_.erase(it);
  stats_[block.device].allocated_bytes -= block.size;
  free_[PoolKey{block.device, block.stream}].emplace(block.size, block);
}

void CachingAllocator::release_cached_locked(int device) {
  std::vector<int> synced;
  for (auto& [key, pool] : free_) {
    if ((device >= 0 && key.device != device) || pool.empty()) continue;
    // Kernels queued before a block was freed may still read it: wait for them once per device.
    if (std::find(synced.begin(), synced.end(), key.device) == synced.end()) {
      raw_.synchronize(key.device);
      synced.push_back(key.device);
    }
    MemoryStats& st = stats_[key.device];
    for (auto& [size, block] : pool) {
      raw_.raw_free(block.ptr, block.device);
      ++st.raw_free_count;
      st.reserved_bytes -= size;
    }
    pool.clear();
  }
}

MemoryStats CachingAllocator::stats(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = stats_.find(device);
  return it == stats_.end() ? MemoryStats{} : it->second;
}

void CachingAllocator::reset_peak(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats& st = stats_[device];
  st.peak_allocated_bytes = st.allocated_bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked(-1);
}

}  // namespace ringgrad
