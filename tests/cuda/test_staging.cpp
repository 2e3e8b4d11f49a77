// tests/cuda/test_staging.cpp: the staging copies of core/cuda.h that the ring backend moves CUDA
// gradients with -- right bytes in both directions, ordered after the ready point, and (on a real
// GPU only) not waiting for the kernels queued after it.
//
// Label `cuda`: these tests FAIL without a GPU. The one tagged [async] checks that a copy really
// overlaps 0.7 TFLOP of products, which needs a GPU's speed, so the emulated run leaves it out (the
// emulator's lazy streams check the ordering itself: tests/cuda_emu/planted_async.cpp).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <vector>

#include <ringgrad/core/cuda.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include "kernels/cuda/runtime.h"
#include "cuda_test_util.h"

using namespace ringgrad;
using ringgrad::test::check_close;
using ringgrad::test::require_gpu;
using ringgrad::test::seeded_host;

TEST_CASE("cuda staging: a gradient goes to pinned memory after its producer and comes back", "[cuda]") {
  require_gpu();
  const int64_t n = GENERATE(1, 7, 1000, 65537);
  const Tensor x = seeded_host({n}, DType::f32, 30);
  const Tensor on_gpu = x.to(Device::cuda(0));
  const Tensor produced = on_gpu * 3.0;  // queued on the compute stream; the ready point follows it
  auto ready = cuda_mark_ready(0);

  Allocator& pinned = cuda_pinned_allocator();
  const int64_t nbytes = n * 4;
  auto* host = static_cast<float*>(pinned.allocate(nbytes, Device::cpu()));
  cuda_copy_to_pinned(*ready, produced.data(), host, nbytes);
  std::vector<float> want = x.to_vector<float>();
  for (float& v : want) v *= 3.0f;
  CHECK(std::memcmp(host, want.data(), static_cast<size_t>(nbytes)) == 0);

  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 11) - 5.0f;
  Tensor back = full({n}, NAN, TensorOptions(DType::f32).device(Device::cuda(0)));
  auto after = cuda_mark_ready(0);  // the fill above is the destination's last writer
  cuda_copy_from_pinned(*after, host, back.data(), nbytes);
  std::memset(host, 0xFF, static_cast<size_t>(nbytes));  // the copy has returned: the buffer is free
  const Tensor doubled = back * 2.0;                     // compute-stream work sees the copied bytes
  std::vector<float> want_back(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) want_back[static_cast<size_t>(i)] = 2.0f * (static_cast<float>(i % 11) - 5.0f);
  check_close(doubled, from_vector(want_back, {n}), 0, 0, "pinned -> cuda:0, then a kernel reads it");
  pinned.deallocate(host, nbytes, Device::cpu());
}

TEST_CASE("cuda staging: a copy to pinned memory does not wait for kernels queued after the ready point",
          "[cuda][async]") {
  require_gpu();
  const Tensor a = seeded_host({2048, 2048}, DType::f32, 31).to(Device::cuda(0));
  const Tensor grad = seeded_host({4096}, DType::f32, 32).to(Device::cuda(0));
  // Pinned memory first: cudaHostAlloc may synchronise the device, which would finish the products.
  Allocator& pinned = cuda_pinned_allocator();
  void* host = pinned.allocate(4096 * 4, Device::cpu());
  auto ready = cuda_mark_ready(0);
  Tensor busy = a;
  for (int i = 0; i < 40; ++i) busy = matmul(busy, a) * 1e-3;  // ~0.7 TFLOP queued after the ready point
  cuda_copy_to_pinned(*ready, grad.data(), host, 4096 * 4);
  // The compute stream must still be busy with the products: the copy waited for `ready` only.
  const cudaError_t state = cudaStreamQuery(kernels::cuda::stream_for(0));
  CHECK(state == cudaErrorNotReady);
  cuda_synchronize(0);
  CHECK(std::memcmp(host, grad.to_vector<float>().data(), 4096 * 4) == 0);
  pinned.deallocate(host, 4096 * 4, Device::cpu());
}
