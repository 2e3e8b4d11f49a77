// bench/dp_vs_ddp/peak_memory.h: the most memory each device held during one mode.
//
// CUDA devices have the caching allocator's statistics (core/cuda.h). CPU devices have no allocator
// of their own, so the benchmark installs one: a thin wrapper around the host allocator that counts
// live bytes per logical device (cpu:k) and remembers the peak -- what torch.cuda.max_memory_allocated
// reports for a GPU. It counts tensor storage only (parameters, gradients, buckets, activations,
// optimizer state), not the program, thread stacks or the allocator's own caches.
#pragma once

#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <array>
#include <atomic>

namespace bench {

class CountingHostAllocator final : public ringgrad::Allocator {
 public:
  static constexpr int kMaxDevices = 64;

  // Installs the counter as the CPU allocator; call before the first tensor exists (tensors made
  // earlier would be freed through it without having been counted).
  static void install() { ringgrad::set_allocator(ringgrad::DeviceKind::CPU, &instance()); }
  static CountingHostAllocator& instance() {
    static auto* counter = new CountingHostAllocator();  // never destroyed: tensors outlive main
    return *counter;
  }

  void* allocate(int64_t nbytes, ringgrad::Device device) override {
    void* p = ringgrad::host_allocator().allocate(nbytes, device);
    Slot& s = slot(device);
    const int64_t now = s.live.fetch_add(nbytes) + nbytes;
    int64_t peak = s.peak.load();
    while (now > peak && !s.peak.compare_exchange_weak(peak, now)) {
    }
    return p;
  }

  void deallocate(void* ptr, int64_t nbytes, ringgrad::Device device) override {
    slot(device).live.fetch_sub(nbytes);
    ringgrad::host_allocator().deallocate(ptr, nbytes, device);
  }

  int64_t peak_bytes(int device) { return slots_[index(device)].peak.load(); }
  void reset_peak(int device) {
    Slot& s = slots_[index(device)];
    s.peak.store(s.live.load());
  }

 private:
  struct Slot {
    std::atomic<int64_t> live{0}, peak{0};
  };
  static int index(int device) { return std::clamp(device, 0, kMaxDevices - 1); }
  Slot& slot(ringgrad::Device d) { return slots_[index(d.index)]; }
  std::array<Slot, kMaxDevices> slots_;
};

// Peak bytes of `device` since the last reset_peak_memory(device), in MiB.
inline double peak_memory_mb(ringgrad::Device device) {
  const int64_t bytes = device.is_cuda() ? ringgrad::cuda_memory_stats(device.index).peak_allocated_bytes
                                         : CountingHostAllocator::instance().peak_bytes(device.index);
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

inline void reset_peak_memory(ringgrad::Device device) {
  if (device.is_cuda())
    ringgrad::cuda_reset_peak_memory_stats(device.index);
  else
    CountingHostAllocator::instance().reset_peak(device.index);
}

}  // namespace bench
