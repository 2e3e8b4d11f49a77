// tests/cuda/test_cuda_training.cpp: whole training steps on cuda:0 -- the loss curve follows the
// CPU's, and after warm-up the caching allocator serves every step without a single cudaMalloc --
// plus the memory statistics, empty_cache, pinned memory and the out-of-memory error.
//
// Label `cuda`: these tests FAIL without a GPU.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <ringgrad/core/cuda.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include "cuda_test_util.h"
#include <ringgrad/kernels/backend.h>
#include <ringgrad/nn/nn.h>
#include "test_util.h"

using namespace ringgrad;
using ringgrad::test::require_gpu;
using ringgrad::test::seeded_host;

namespace {

const Device kGpu = Device::cuda(0);

struct Batch {
  Tensor x, labels;
};

// Fixed batches of a learnable task: the label is the argmax of a fixed random projection of x.
std::vector<Batch> make_batches(int count, int64_t rows, int64_t features, int64_t classes) {
  const Tensor projection = seeded_host({features, classes}, DType::f32, 100);
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) {
    Batch b;
    b.x = seeded_host({rows, features}, DType::f32, 200 + static_cast<uint32_t>(i));
    b.labels = argmax(matmul(b.x, projection), 1);
    batches.push_back(b);
  }
  return batches;
}

// One optimizer step per batch; returns the loss of each step (read on the host, as a user would).
template <typename Opt>
std::vector<double> train(nn::MLP& model, Opt& opt, const std::vector<Batch>& batches, Device device, int epochs) {
  std::vector<double> losses;
  for (int e = 0; e < epochs; ++e) {
    for (const Batch& b : batches) {
      const Tensor loss = cross_entropy(model.forward(b.x.to(device)), b.labels.to(device));
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses.push_back(loss.item());
    }
  }
  return losses;
}

std::shared_ptr<nn::MLP> copy_of(const nn::MLP& model, Device device) {
  auto copy = std::dynamic_pointer_cast<nn::MLP>(model.clone());
  REQUIRE(copy != nullptr);
  copy->to(device);
  return copy;
}

}  // namespace

TEST_CASE("cuda training: an MLP on cuda:0 follows the CPU loss curve", "[cuda]") {
  require_gpu();
  manual_seed(7);
  nn::MLP cpu_model({33, 129, 65, 7});
  auto gpu_model = copy_of(cpu_model, kGpu);
  const std::vector<Batch> batches = make_batches(4, 61, 33, 7);

  nn::optim::SGD cpu_opt(cpu_model.parameters(), nn::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  nn::optim::SGD gpu_opt(gpu_model->parameters(), nn::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  const std::vector<double> cpu_losses = train(cpu_model, cpu_opt, batches, Device::cpu(), 8);
  const std::vector<double> gpu_losses = train(*gpu_model, gpu_opt, batches, kGpu, 8);

  REQUIRE(gpu_losses.size() == cpu_losses.size());
  for (size_t i = 0; i < cpu_losses.size(); ++i) {
    INFO("step " << i << ": GPU loss " << gpu_losses[i] << ", CPU loss " << cpu_losses[i]);
    // float32 GEMMs sum in a different order on the two devices; 32 steps of SGD let the rounding
    // differences grow a little, far below the change of the loss itself.
    CHECK(std::fabs(gpu_losses[i] - cpu_losses[i]) <= 1e-4 + 1e-3 * std::fabs(cpu_losses[i]));
  }
  CHECK(gpu_losses.back() < 0.7 * gpu_losses.front());  // it learns
  for (const auto& [name, p] : gpu_model->named_parameters()) CHECK(p.device() == kGpu);
}

TEST_CASE("cuda training: AdamW on cuda:0 follows the CPU loss curve", "[cuda]") {
  require_gpu();
  manual_seed(8);
  nn::MLP cpu_model({17, 33, 5}, nn::MLP::Act::GeluTanh);
  auto gpu_model = copy_of(cpu_model, kGpu);
  const std::vector<Batch> batches = make_batches(3, 29, 17, 5);
  const auto options = nn::optim::AdamOptions(1e-2).weight_decay(0.01);
  nn::optim::AdamW cpu_opt(cpu_model.parameters(), options);
  nn::optim::AdamW gpu_opt(gpu_model->parameters(), options);
  const std::vector<double> cpu_losses = train(cpu_model, cpu_opt, batches, Device::cpu(), 4);
  const std::vector<double> gpu_losses = train(*gpu_model, gpu_opt, batches, kGpu, 4);
  for (size_t i = 0; i < cpu_losses.size(); ++i) {
    INFO("step " << i << ": GPU loss " << gpu_losses[i] << ", CPU loss " << cpu_losses[i]);
    CHECK(std::fabs(gpu_losses[i] - cpu_losses[i]) <= 1e-4 + 1e-3 * std::fabs(cpu_losses[i]));
  }
}

TEST_CASE("cuda allocator: after warm-up, training steps make no cudaMalloc", "[cuda]") {
  require_gpu();
  manual_seed(9);
  // Weights of 3 MiB (the large-block pool) and activations of 256 KiB (the small one); the size
  // does not matter beyond that, and a small model keeps the emulated run short.
  auto model = copy_of(nn::MLP({784, 1024, 10}), kGpu);
  nn::optim::SGD opt(model->parameters(), nn::optim::SGDOptions(0.01).momentum(0.9));
  const std::vector<Batch> batches = make_batches(2, 64, 784, 10);
  train(*model, opt, batches, kGpu, 1);  // warm-up: the cache fills

  const MemoryStats warm = cuda_memory_stats(0);
  train(*model, opt, batches, kGpu, 5);  // 10 more steps
  const MemoryStats after = cuda_memory_stats(0);
  INFO("raw cudaMalloc calls: " << warm.raw_alloc_count << " after warm-up, " << after.raw_alloc_count
                                << " after 10 more steps; reserved " << after.reserved_bytes << " bytes");
  CHECK(warm.raw_alloc_count > 0);
  CHECK(after.raw_alloc_count == warm.raw_alloc_count);
  CHECK(after.raw_free_count == warm.raw_free_count);
  CHECK(after.reserved_bytes == warm.reserved_bytes);
  CHECK(after.allocated_bytes == warm.allocated_bytes);  // nothing leaks from step to step
  CHECK(after.peak_allocated_bytes <= after.reserved_bytes);
}

TEST_CASE("cuda allocator: statistics follow tensors, and empty_cache returns the cache", "[cuda]") {
  require_gpu();
  cuda_synchronize(0);
  cuda_empty_cache();
  const MemoryStats base = cuda_memory_stats(0);
  CHECK(base.reserved_bytes == base.allocated_bytes);  // nothing cached
  {
    const Tensor t = empty({3, 1000, 1000}, kGpu);  // 12 000 000 bytes, rounded to 12 MiB
    const MemoryStats held = cuda_memory_stats(0);
    CHECK(held.allocated_bytes - base.allocated_bytes == 12 * (int64_t{1} << 20));
    CHECK(held.peak_allocated_bytes >= held.allocated_bytes);
  }
  const MemoryStats freed = cuda_memory_stats(0);
  CHECK(freed.allocated_bytes == base.allocated_bytes);
  CHECK(freed.reserved_bytes >= base.reserved_bytes + 12 * (int64_t{1} << 20));  // kept for reuse
  {
    const Tensor again = empty({3, 1000, 1000}, kGpu);
    CHECK(cuda_memory_stats(0).raw_alloc_count == freed.raw_alloc_count);  // served from the cache
  }
  cuda_empty_cache();
  const MemoryStats emptied = cuda_memory_stats(0);
  CHECK(emptied.reserved_bytes == emptied.allocated_bytes);
  CHECK(emptied.raw_free_count > freed.raw_free_count);
  cuda_reset_peak_memory_stats(0);
  CHECK(cuda_memory_stats(0).peak_allocated_bytes == emptied.allocated_bytes);
}

TEST_CASE("cuda allocator: asking for more than the GPU has is a clear out-of-memory error", "[cuda]") {
  require_gpu();
  const int64_t huge = int64_t{1} << 48;  // 256 TiB of float32 elements, 1 PiB of bytes
  CHECK_ERROR(empty({huge}, kGpu), "out of memory on cuda:0", "tried to allocate", "bytes are allocated", "reserved");
  CHECK(sum(zeros({4}, kGpu)).item() == 0.0);  // the device is still usable
}

TEST_CASE("cuda pinned memory: allocations are reused and usable as copy sources", "[cuda]") {
  require_gpu();
  Allocator& pinned = cuda_pinned_allocator();
  const int64_t nbytes = 3 * 1000 * 4;
  void* p = pinned.allocate(nbytes, Device::cpu());
  REQUIRE(p != nullptr);
  const MemoryStats st = cuda_pinned_memory_stats();
  CHECK(st.allocated_bytes >= nbytes);
  std::vector<float> values(3000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  std::memcpy(p, values.data(), static_cast<size_t>(nbytes));
  Tensor g = empty({3000}, kGpu);
  kernels::backend_for(DeviceKind::CUDA).copy_between(DeviceKind::CPU, 0, p, DeviceKind::CUDA, 0, g.data(), nbytes);
  pinned.deallocate(p, nbytes, Device::cpu());
  CHECK(g.to_vector<float>() == values);
  void* q = pinned.allocate(nbytes, Device::cpu());
  CHECK(q == p);  // the cached page-locked block comes back: no second cudaHostAlloc
  CHECK(cuda_pinned_memory_stats().raw_alloc_count == st.raw_alloc_count);
  pinned.deallocate(q, nbytes, Device::cpu());
}
