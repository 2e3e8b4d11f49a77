// core/storage.cpp: which allocator a storage uses, and its lifetime.
#include <ringgrad/core/storage.h>

#include <ringgrad/core/base/error.h>
#include <ringgrad/kernels/backend.h>

namespace ringgrad {

Allocator& allocator_for(DeviceKind kind) {
  Allocator* a = installed_allocator(kind);
  if (a == nullptr && kind == DeviceKind::CUDA) {
    kernels::backend_for(kind, "allocator_for");  // installs the caching allocator, or says why there is no CUDA
    a = installed_allocator(kind);
  }
  RINGGRAD_CHECK(a != nullptr, "allocator_for: no allocator for ", kind == DeviceKind::CUDA ? "cuda" : "cpu",
                 " devices in this build");
  return *a;
}

Storage::Storage(Device device, int64_t nbytes)
    : nbytes_(nbytes), device_(device), allocator_(&allocator_for(device.kind)) {
  data_ = allocator_->allocate(nbytes, device);
}

Storage::~Storage() {
  if (data_) allocator_->deallocate(data_, nbytes_, device_);
}

}  // namespace ringgrad
