// tests/cuda/test_cuda_devices.cpp: which GPU a host thread's CUDA calls go to. CUDA keeps a current
// device, and a current context, per host thread; a thread that never chose one has no context, and
// the first call that needs one creates it on cuda:0 (about 0.5 GiB there, and a failure on a GPU in
// exclusive-process mode). ringgrad's device guards must leave such a thread on the device it used,
// never "restore" cuda:0. Each case runs its GPU work on a fresh thread, which has no context yet.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include <ringgrad/core/cuda.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include "cuda_test_util.h"
#include "kernels/cuda/runtime.h"

using namespace ringgrad;

namespace {
// Runs `work` on a new thread; returns the device whose context is current there before and after.
template <typename Work>
std::pair<int, int> contexts_around(Work work) {
  int before = -2, after = -2;
  std::thread([&] {
    before = kernels::cuda::current_context_device();
    work();
    after = kernels::cuda::current_context_device();
  }).join();
  return {before, after};
}
}  // namespace

TEST_CASE("cuda devices: a thread with no device keeps the GPU its tensor work used, not cuda:0", "[cuda][multi-gpu]") {
  test::require_gpus(2);
  std::vector<float> got;
  const auto [before, after] = contexts_around([&] {
    const Tensor x = full({7}, 3.0, TensorOptions(DType::f32).device(Device::cuda(1)));
    got = (x * x + 1.0).to(Device::cpu()).to_vector<float>();
  });
  CHECK(before == -1);
  CHECK(after == 1);
  CHECK(got == std::vector<float>(7, 10.0f));
}

TEST_CASE("cuda devices: a guard on a thread with no device leaves that device current", "[cuda][multi-gpu]") {
  test::require_gpus(2);
  const auto [before, after] = contexts_around([] { CudaDeviceGuard guard(1); });
  CHECK(before == -1);
  CHECK(after == 1);
}

TEST_CASE("cuda devices: a guard restores the device a thread had chosen", "[cuda][multi-gpu]") {
  test::require_gpus(2);
  const auto [before, after] = contexts_around([] {
    CudaDeviceGuard chosen(1);  // the thread's own choice, for the rest of this scope
    {
      CudaDeviceGuard guard(0);
      CHECK(kernels::cuda::current_context_device() == 0);
    }
    CHECK(kernels::cuda::current_context_device() == 1);
  });
  CHECK(before == -1);
  CHECK(after == 1);
}

TEST_CASE("cuda devices: pinned memory on a thread with no device goes to a GPU that has a context",
          "[cuda][multi-gpu]") {
  test::require_gpus(2);
  { CudaDeviceGuard make_one(1); }  // this process has a context on cuda:1 (maybe on cuda:0 too, from other tests)
  int expected = -2;
  const auto [before, after] = contexts_around([&] {
    expected = kernels::cuda::device_for_host_call();  // the first GPU with a context: no new one
    const int64_t nbytes = 7777777;                    // a size nothing has cached
    void* p = cuda_pinned_allocator().allocate(nbytes, Device::cpu());
    cuda_pinned_allocator().deallocate(p, nbytes, Device::cpu());
  });
  CHECK(before == -1);
  CHECK(expected >= 0);
  CHECK(after == expected);
}
