// kernels/backend.cpp: backend_for(), the one place that picks a backend for a device kind.
#include "kernels/backend.h"

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace ringgrad {

Backend& backend_for(DeviceKind kind, const char* op) {
  if (kind == DeviceKind::CPU) return cpu_backend();
#ifdef RINGGRAD_WITH_CUDA
  throw Error(detail::str(op, ": CUDA tensors are not supported yet: this build compiled the CUDA toolchain probe "
                              "only; the CUDA backend arrives with the CUDA kernels"));
#else
  throw Error(detail::str(op, ": no CUDA backend in this build (configure with -DRINGGRAD_CUDA=ON)"));
#endif
}

bool built_with_cuda() {
#ifdef RINGGRAD_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace ringgrad
