// kernels/cpu/cpu_backend.cpp: the process's single CpuBackend.
#include "kernels/cpu/cpu_backend.h"

namespace ringgrad {

Backend& cpu_backend() {
  // A function-local static is built on first use, thread-safely, and needs no registration order.
  static CpuBackend backend;
  return backend;
}

}  // namespace ringgrad
