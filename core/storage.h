// core/storage.h: Storage, a reference-counted buffer on one device, and the Allocator it comes from.
//
// Many tensors (views) can share one Storage; it is freed when the last of them goes away. Memory is
// obtained through an Allocator per device kind, so the CUDA caching allocator (which keeps freed
// blocks for reuse instead of calling cudaFree) can plug in without changing Storage.
#pragma once

#include <cstdint>
#include <memory>

#include "core/device.h"

namespace ringgrad {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(int64_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, int64_t nbytes, Device device) = 0;
};

// Host memory aligned to 64 bytes (a cache line, and enough for any SIMD load Eigen issues).
constexpr int64_t kHostAlignment = 64;
Allocator& host_allocator();

// The allocator used for new storages of this kind, and a way to replace it (returns the old one).
// CUDA storages use the CUDA backend's caching allocator (core/cuda.h), installed by the backend's
// first use unless set_allocator() put another one there before.
Allocator& allocator_for(DeviceKind kind);
Allocator* set_allocator(DeviceKind kind, Allocator* allocator);
// Installs `allocator` only when the kind has none yet; returns whether it did.
bool set_allocator_if_unset(DeviceKind kind, Allocator* allocator);

class Storage {
 public:
  Storage(Device device, int64_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  int64_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  int64_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_;  // the one that allocated data_, which must also free it
};

}  // namespace ringgrad
