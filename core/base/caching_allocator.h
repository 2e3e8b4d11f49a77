/// @file
/// core/base/caching_allocator.h: a caching allocator -- freed blocks are kept for reuse instead of being
/// returned to the device -- over any source of raw memory.
///
/// Why: cudaMalloc and cudaFree are slow (tens of microseconds to milliseconds) and cudaFree waits for
/// the whole device. A training step allocates and frees the same sizes every iteration, so after the
/// first step every request can be served from blocks the previous step freed: no cudaMalloc at all.
///
/// Design (the CUDA allocator of kernels/cuda and the pinned host allocator are two instances):
/// @code
///   - Sizes are rounded up. Small requests (<= 1 MiB) to a multiple of kGranuleBytes = 512 B and
///     each gets its own raw allocation; large ones to a multiple of kLargeGranuleBytes = 2 MiB, so a
///     request that grows a little from step to step keeps fitting its old block. (PyTorch carves
///     small blocks out of 2 MiB segments; ringgrad keeps them whole, which is simpler and wastes at
///     most one cudaMalloc per distinct small size.)
///   - Blocks are never split or merged. A free block is reused for a request of rounded size r when
///     r <= size <= 2r, the smallest such block first (best fit): waste stays under half a block.
///     Without splitting, one size-ordered map per pool serves both size classes.
///   - Free blocks are kept per (device, stream). Work on one stream runs in order, so a block freed
///     while kernels on its stream may still read it is safe to hand to the next request on that same
///     stream; another stream would need an event first (not needed yet: ringgrad runs one stream per
///     device).
///   - When the raw allocator runs out, the cache of that device is emptied and the request retried
///     once; after that the error says what was asked for, and how much is allocated and reserved.
///   - Statistics per device: allocated (in blocks handed out, rounded), reserved (held from the raw
///     allocator: allocated + cached), the peak of allocated, and the number of raw allocations and
///     frees -- a training loop whose raw_alloc_count stops growing after warm-up makes no cudaMalloc.
/// @endcode
/// Thread-safe: one mutex (tensors are freed on whichever thread drops the last handle).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

#include <ringgrad/core/base/allocator.h>

namespace ringgrad {

/// Where a caching allocator gets its memory from: cudaMalloc/cudaFree, cudaHostAlloc/cudaFreeHost,
/// or a counting fake in the tests.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  /// nbytes on `device`; null when the device is out of memory. Other failures throw ringgrad::Error.
  virtual void* raw_alloc(int64_t nbytes, int device) = 0;
  virtual void raw_free(void* ptr, int device) = 0;  ///< returns memory from raw_alloc
  /// Waits until no queued work can still touch memory of `device`; called before cached blocks are
  /// released. Nothing to do for memory without asynchronous users.
  virtual void synchronize(int /*device*/) {}
};

/// The statistics of one device's caching allocator (see the top of this file), in bytes and counts.
struct MemoryStats {
  int64_t allocated_bytes = 0;       ///< in blocks handed out (rounded sizes)
  int64_t reserved_bytes = 0;        ///< held from the raw allocator: allocated + cached
  int64_t peak_allocated_bytes = 0;  ///< the most allocated_bytes has been (see reset_peak)
  int64_t raw_alloc_count = 0;       ///< successful raw allocations (cudaMalloc calls)
  int64_t raw_free_count = 0;        ///< raw frees (cudaFree calls)
  int64_t oom_retry_count = 0;       ///< times the cache was emptied because the raw allocator ran out
};

/// The caching allocator the top of this file describes. Thread-safe.
class CachingAllocator final : public Allocator {
 public:
  static constexpr int64_t kGranuleBytes = 512;                    ///< small requests round up to a multiple of this
  static constexpr int64_t kSmallLimitBytes = int64_t{1} << 20;    ///< 1 MiB
  static constexpr int64_t kLargeGranuleBytes = int64_t{2} << 20;  ///< 2 MiB

  /// The stream a plain allocate() (Storage's call) uses on a device; null when streams do not matter.
  using StreamOf = std::function<Stream(int device)>;

  /// `kind` only names devices in messages ("cuda:0"); `raw` must outlive the allocator.
  CachingAllocator(RawMemory& raw, DeviceKind kind, StreamOf stream_of = nullptr);
  ~CachingAllocator() override;  ///< returns every block it still holds to `raw`
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// allocate_on() the stream StreamOf gives for the device; throws ringgrad::Error when even an
  /// emptied cache leaves too little, saying what was asked for and what is allocated and reserved.
  void* allocate(int64_t nbytes, Device device) override;
  void deallocate(void* ptr, int64_t nbytes, Device device) override;  ///< free(ptr)
  /// A block for use on `stream`; it returns to that stream's pool when freed. Null for 0 bytes.
  void* allocate_on(int64_t nbytes, int device, Stream stream);
  /// Returns a block to its stream's pool (null does nothing); throws on a pointer not in use.
  void free(void* ptr);

  MemoryStats stats(int device) const;  ///< of `device`
  void reset_peak(int device);          ///< peak_allocated_bytes = allocated_bytes
  /// Returns every cached (free) block of every device to the raw allocator; blocks in use stay.
  void empty_cache();

  /// The size a request of nbytes is rounded to (> 0 for nbytes > 0).
  static int64_t round_size(int64_t nbytes);

 private:
  struct Block {
    void* ptr = nullptr;
    int64_t size = 0;
    int device = 0;
    Stream stream = nullptr;
  };
  struct PoolKey {
    int device;
    Stream stream;
    bool operator<(const PoolKey& o) const { return device != o.device ? device < o.device : stream < o.stream; }
  };
  using Pool = std::multimap<int64_t, Block>;  // free blocks by size: lower_bound is the best fit

  void* raw_alloc_locked(int64_t size, int device, int64_t requested);
  void release_cached_locked(int device);  // device < 0: every device

  RawMemory& raw_;
  DeviceKind kind_;
  StreamOf stream_of_;
  mutable std::mutex mutex_;
  std::map<PoolKey, Pool> free_;
  std::unordered_map<void*, Block> in_use_;
  std::map<int, MemoryStats> stats_;
};

}  // namespace ringgrad
