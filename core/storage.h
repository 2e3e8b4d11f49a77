/// @file
/// core/storage.h: Storage, a reference-counted buffer on one device, and the Allocator it comes from.
///
/// Many tensors (views) can share one Storage; it is freed when the last of them goes away. Memory is
/// obtained through an Allocator per device kind, so the CUDA caching allocator (which keeps freed
/// blocks for reuse instead of calling cudaFree) can plug in without changing Storage.
#pragma once

#include <cstdint>
#include <memory>

#include <ringgrad/core/base/allocator.h>
#include <ringgrad/core/device.h>

namespace ringgrad {

// Allocator, host_allocator() and set_allocator() are base-layer (core/base/allocator.h).

/// The allocator used for new storages of this kind. CUDA storages use the CUDA backend's caching
/// allocator (core/cuda.h), installed by the backend's first use unless set_allocator() put another
/// one there before; asking for it is what starts the backend.
Allocator& allocator_for(DeviceKind kind);

/// A block of memory on one device, from allocator_for(device.kind), freed with the last handle to it.
/// Tensors view it; several views share one Storage.
class Storage {
 public:
  /// Allocates nbytes (uninitialised); throws ringgrad::Error when the allocator cannot.
  Storage(Device device, int64_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }        ///< the first byte
  int64_t nbytes() const { return nbytes_; }  ///< the size, in bytes
  Device device() const { return device_; }   ///< where the memory is

 private:
  void* data_ = nullptr;
  int64_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_;  // the one that allocated data_, which must also free it
};

}  // namespace ringgrad
