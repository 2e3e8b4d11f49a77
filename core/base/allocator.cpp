// core/base/allocator.cpp: the 64-byte-aligned host allocator and the per-kind registry.
#include <ringgrad/core/base/allocator.h>

#include <atomic>
#include <cstdlib>

#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace {

class HostAllocator final : public Allocator {
 public:
  void* allocate(int64_t nbytes, Device) override {
    if (nbytes == 0) return nullptr;
    // aligned_alloc requires a size that is a multiple of the alignment.
    const auto rounded = static_cast<size_t>((nbytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment);
    void* p = std::aligned_alloc(kHostAlignment, rounded);
    RINGGRAD_CHECK(p != nullptr, "host allocator: out of memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* ptr, int64_t, Device) override { std::free(ptr); }
};

std::atomic<Allocator*> g_allocators[2] = {&host_allocator(), nullptr};

}  // namespace

Allocator& host_allocator() {
  // Never destroyed: a tensor freed during static destruction (or by a worker thread at exit) must
  // still find its allocator alive.
  static auto* allocator = new HostAllocator();
  return *allocator;
}

Allocator* installed_allocator(DeviceKind kind) { return g_allocators[static_cast<int>(kind)].load(); }

Allocator* set_allocator(DeviceKind kind, Allocator* allocator) {
  return g_allocators[static_cast<int>(kind)].exchange(allocator);
}

bool set_allocator_if_unset(DeviceKind kind, Allocator* allocator) {
  Allocator* expected = nullptr;
  return g_allocators[static_cast<int>(kind)].compare_exchange_strong(expected, allocator);
}

}  // namespace ringgrad
