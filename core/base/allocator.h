/// @file
/// core/base/allocator.h: where memory comes from -- the Allocator interface, the host allocator, and
/// the registry of one allocator per device kind that Storage (core/storage.h) allocates from.
///
/// Base layer, so kernels/cuda can install its caching allocator (core/base/caching_allocator.h)
/// without knowing Storage or Tensor.
#pragma once

#include <cstdint>

#include <ringgrad/core/base/device.h>

namespace ringgrad {

/// Where a Storage's memory comes from, one per device kind (set_allocator replaces it).
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// nbytes of memory on `device`; throws ringgrad::Error when there is not enough.
  virtual void* allocate(int64_t nbytes, Device device) = 0;
  /// Returns memory from allocate(), with the same nbytes and device.
  virtual void deallocate(void* ptr, int64_t nbytes, Device device) = 0;
};

/// Host memory aligned to 64 bytes (a cache line, and enough for any SIMD load Eigen issues).
constexpr int64_t kHostAlignment = 64;
Allocator& host_allocator();  ///< the CPU's allocator (kHostAlignment-aligned memory)

/// The allocator installed for a device kind, or null when none is (yet): CUDA's is installed by the
/// CUDA backend's first use. core/storage.h's allocator_for() is what Storage calls.
Allocator* installed_allocator(DeviceKind kind);
/// Replaces the allocator of a kind; returns the old one.
Allocator* set_allocator(DeviceKind kind, Allocator* allocator);
/// Installs `allocator` only when the kind has none yet; returns whether it did.
bool set_allocator_if_unset(DeviceKind kind, Allocator* allocator);

}  // namespace ringgrad
