// cuda_emu/launch.h: a kernel launch, kernel<<<grid, block, shared, stream>>>(args...), as a call.
//
// The arguments are converted to the kernel's parameter types once, at the launch (as CUDA copies
// them into the parameter buffer, so the launch may run later); every thread then gets its own copy, since a kernel may
// modify its by-value parameters. Pointer parameters are checked before anything runs: each must be null or point into
// device memory the current device can reach, or into pinned host memory -- a pageable host pointer handed to a kernel
// is an illegal address on a GPU, and the emulator stops there instead of letting the kernel read host memory that a
// GPU never could. Each pointer parameter also counts as an access of its allocation for the happens-before checker
// (src/races.h): a pointer to const reads it, any other pointer writes it. Pointers inside a struct parameter are not
// seen.
#pragma once

#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_emu/device.h"
#include "cuda_emu/runtime_api.h"

namespace cuda_emu {

// An operation's use of the allocation holding `ptr`.
struct MemoryAccess {
  const void* ptr;
  bool writes;
};

struct Launch {
  const char* kernel;  // the name given to the launch helper
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
};

// Checks the configuration and the stream (an invalid one becomes the "last error", as with
// <<<>>>), then queues the grid on the stream (src/streams.cpp says when it runs), as an operation that
// makes `accesses`; `run_thread(closure)` is one thread's whole kernel. The queued launch keeps
// `closure` alive until it has run.
void run_grid(const Launch& launch, void (*run_thread)(void*), std::shared_ptr<void> closure,
              const std::vector<MemoryAccess>& accesses);

// Stops the program unless `ptr` is null or usable by a kernel on the current device.
void check_kernel_pointer(const Launch& launch, int parameter, const void* ptr);

template <typename T>
void check_parameter(const Launch& launch, int index, const T& value, std::vector<MemoryAccess>* accesses) {
  if constexpr (std::is_pointer_v<T>) {
    check_kernel_pointer(launch, index, static_cast<const void*>(value));
    accesses->push_back(MemoryAccess{static_cast<const void*>(value), !std::is_const_v<std::remove_pointer_t<T>>});
  }
}

template <typename... Params>
struct KernelCall {
  void (*kernel)(Params...);
  std::tuple<std::decay_t<Params>...> params;

  static void run_thread(void* self) {
    auto* call = static_cast<KernelCall*>(self);
    std::tuple<std::decay_t<Params>...> mine = call->params;  // this thread's parameters
    std::apply(call->kernel, mine);
  }
};

template <typename... Params, typename... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
            cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "a launch passes every parameter of the kernel");
  const Launch l{name, grid, block, shared_bytes, stream};
  auto call = std::make_shared<KernelCall<Params...>>(
      KernelCall<Params...>{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)});
  std::vector<MemoryAccess> accesses;
  std::apply(
      [&](const auto&... p) {
        int index = 0;
        (check_parameter(l, index++, p, &accesses), ...);
      },
      call->params);
  run_grid(l, &KernelCall<Params...>::run_thread, std::move(call), accesses);
}

}  // namespace cuda_emu
