// tests/core/test_caching_allocator.cpp: the caching allocator's logic, on a counting fake of raw
// memory -- the same class the CUDA backend runs over cudaMalloc/cudaFree, so these CPU tests cover
// its reuse, rounding, statistics and out-of-memory handling without a GPU.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <vector>

#include <ringgrad/core/base/caching_allocator.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/nn.h>
#include "test_util.h"

using namespace ringgrad;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Raw memory from malloc, with every call counted, and an optional capacity per device beyond which
// raw_alloc returns null (as cudaMalloc reports cudaErrorMemoryAllocation).
class FakeRawMemory final : public RawMemory {
 public:
  void* raw_alloc(int64_t nbytes, int device) override {
    ++alloc_calls;
    last_alloc_bytes = nbytes;
    if (capacity_bytes >= 0 && live_bytes[device] + nbytes > capacity_bytes) return nullptr;
    void* p = std::aligned_alloc(64, static_cast<size_t>(nbytes));  // rounded sizes are multiples of 512
    live[p] = nbytes;
    live_bytes[device] += nbytes;
    return p;
  }
  void raw_free(void* ptr, int device) override {
    ++free_calls;
    REQUIRE(live.count(ptr) == 1);  // the allocator never frees what it did not get
    live_bytes[device] -= live[ptr];
    live.erase(ptr);
    std::free(ptr);
  }
  void synchronize(int) override { ++sync_calls; }

  int64_t capacity_bytes = -1;  // -1: unlimited
  int alloc_calls = 0, free_calls = 0, sync_calls = 0;
  int64_t last_alloc_bytes = 0;
  std::map<void*, int64_t> live;
  std::map<int, int64_t> live_bytes;
};

Stream stream_a() { return reinterpret_cast<Stream>(0x1000); }
Stream stream_b() { return reinterpret_cast<Stream>(0x2000); }

}  // namespace

TEST_CASE("caching allocator: sizes round to 512 B up to 1 MiB and to 2 MiB above", "[allocator]") {
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::round_size(kMiB) == kMiB);
  CHECK(CachingAllocator::round_size(kMiB + 1) == 2 * kMiB);
  CHECK(CachingAllocator::round_size(5 * kMiB + 3) == 6 * kMiB);
  CHECK_ERROR(CachingAllocator::round_size(-1), "caching allocator", "-1");

  FakeRawMemory raw;
  CachingAllocator alloc(raw, DeviceKind::CUDA);
  void* p = alloc.allocate(3 * kMiB + 7, Device::cuda(0));
  CHECK(raw.last_alloc_bytes == 4 * kMiB);  // the raw allocation has the rounded size
  CHECK(alloc.stats(0).allocated_bytes == 4 * kMiB);
  alloc.deallocate(p, 3 * kMiB + 7, Device::cuda(0));
  CHECK(alloc.allocate(0, Device::cuda(0)) == nullptr);  // an empty tensor needs no block
  CHECK(raw.alloc_calls == 1);
}

TEST_CASE("caching allocator: a freed block is reused for the next request of its size class", "[allocator]") {
  FakeRawMemory raw;
  CachingAllocator alloc(raw, DeviceKind::CUDA);
  void* p = alloc.allocate_on(1000, 0, stream_a());  // 1024 B block
  alloc.free(p);
  void* q = alloc.allocate_on(900, 0, stream_a());  // also rounds to 1024: the same block
  CHECK(q == p);
  CHECK(raw.alloc_calls == 1);
  alloc.free(q);

  // Best fit: of the cached 4096 and 2048 B blocks, a 1536 B request takes the 2048 one.
  void* big = alloc.allocate_on(4096, 0, stream_a());
  void* mid = alloc.allocate_on(2048, 0, stream_a());
  alloc.free(big);
  alloc.free(mid);
  CHECK(alloc.allocate_on(1500, 0, stream_a()) == mid);

  // A block more than twice the request is not handed out: 1 MiB stays cached for a 512 B request,
  // while a 1024 B block does serve it.
  CachingAllocator fresh(raw, DeviceKind::CUDA);
  void* mib = fresh.allocate_on(kMiB, 0, stream_a());
  fresh.free(mib);
  const int before = raw.alloc_calls;
  void* small = fresh.allocate_on(100, 0, stream_a());
  CHECK(small != mib);
  CHECK(raw.alloc_calls == before + 1);
  void* kib = fresh.allocate_on(1024, 0, stream_a());
  fresh.free(kib);
  fresh.free(small);
  CHECK(fresh.allocate_on(600, 0, stream_a()) == kib);  // 600 rounds to 1024: an exact fit wins
  CHECK(fresh.allocate_on(100, 0, stream_a()) == small);
}

TEST_CASE("caching allocator: free blocks are kept per device and per stream", "[allocator]") {
  FakeRawMemory raw;
  CachingAllocator alloc(raw, DeviceKind::CUDA);
  void* p = alloc.allocate_on(4096, 0, stream_a());
  alloc.free(p);
  void* other_stream = alloc.allocate_on(4096, 0, stream_b());
  void* other_device = alloc.allocate_on(4096, 1, stream_a());
  CHECK(other_stream != p);
  CHECK(other_device != p);
  CHECK(raw.alloc_calls == 3);
  CHECK(alloc.allocate_on(4096, 0, stream_a()) == p);  // its own pool still has it
  CHECK(alloc.stats(1).allocated_bytes == 4096);
  CHECK(alloc.stats(0).allocated_bytes == 2 * 4096);

  // Plain allocate() (what Storage calls) uses the stream the allocator was told about.
  CachingAllocator with_streams(raw, DeviceKind::CUDA,
                                [](int device) { return device == 0 ? stream_a() : stream_b(); });
  void* s = with_streams.allocate_on(512, 1, stream_b());
  with_streams.free(s);
  CHECK(with_streams.allocate(512, Device::cuda(1)) == s);
}

TEST_CASE("caching allocator: statistics count allocated, reserved, peak and raw calls", "[allocator]") {
  FakeRawMemory raw;
  CachingAllocator alloc(raw, DeviceKind::CUDA);
  void* a = alloc.allocate_on(3 * kMiB, 0, stream_a());  // 4 MiB block
  void* b = alloc.allocate_on(1000, 0, stream_a());      // 1024 B block
  MemoryStats st = alloc.stats(0);
  CHECK(st.allocated_bytes == 4 * kMiB + 1024);
  CHECK(st.reserved_bytes == 4 * kMiB + 1024);
  CHECK(st.peak_allocated_bytes == 4 * kMiB + 1024);
  CHECK(st.raw_alloc_count == 2);

  alloc.free(a);
  st = alloc.stats(0);
  CHECK(st.allocated_bytes == 1024);
  CHECK(st.reserved_bytes == 4 * kMiB + 1024);  // cached, still held
  CHECK(st.peak_allocated_bytes == 4 * kMiB + 1024);
  CHECK(st.raw_free_count == 0);

  alloc.reset_peak(0);
  CHECK(alloc.stats(0).peak_allocated_bytes == 1024);
  alloc.free(b);
  CHECK(alloc.stats(0).allocated_bytes == 0);
  CHECK(alloc.stats(7).raw_alloc_count == 0);  // a device never used has empty statistics
}

TEST_CASE("caching allocator: a steady training loop makes no raw allocation after its first step", "[allocator]") {
  FakeRawMemory raw;
  CachingAllocator alloc(raw, DeviceKind::CUDA);
  // The allocations of one step of an MLP 784-1024-1024-10 with batch 256, in the order forward,
  // backward and optimizer make them: activations live until backward, gradients until the step.
  const std::vector<int64_t> forward = {
      256 * 784 * 4, 256 * 1024 * 4, 256 * 1024 * 4, 256 * 10 * 4, 256 * 10 * 4, 256 * 8, 4};
  const std::vector<int64_t> backward = {256 * 10 * 4, 10 * 1024 * 4,  10 * 4,         256 * 1024 * 4, 1024 * 1024 * 4,
                                         1024 * 4,     256 * 1024 * 4, 1024 * 784 * 4, 1024 * 4};
  auto step = [&] {
    std::vector<void*> live;
    for (int64_t n : forward) live.push_back(alloc.allocate(n, Device::cuda(0)));
    std::vector<void*> grads;
    for (size_t i = 0; i < backward.size(); ++i) {
      grads.push_back(alloc.allocate(backward[i], Device::cuda(0)));
      if (i % 3 == 2 && !live.empty()) {  // activations die as backward passes them
        alloc.free(live.back());
        live.pop_back();
      }
    }
    for (void* p : live) alloc.free(p);
    for (void* p : grads) alloc.free(p);
  };
  step();
  const MemoryStats warm = alloc.stats(0);
  CHECK(warm.raw_alloc_count > 0);
  for (int i = 0; i < 20; ++i) step();
  const MemoryStats after = alloc.stats(0);
  CHECK(after.raw_alloc_count == warm.raw_alloc_count);
  CHECK(after.reserved_bytes == warm.reserved_bytes);
  CHECK(after.allocated_bytes == 0);
  CHECK(raw.alloc_calls == warm.raw_alloc_count);
}

TEST_CASE("caching allocator: empty_cache returns every free block and keeps blocks in use", "[allocator]") {
  FakeRawMemory raw;
  CachingAllocator alloc(raw, DeviceKind::CUDA);
  std::vector<void*> blocks;
  for (int64_t n : {int64_t{512}, int64_t{4096}, 3 * kMiB}) {
    blocks.push_back(alloc.allocate_on(n, 0, stream_a()));
    blocks.push_back(alloc.allocate_on(n, 1, stream_b()));
  }
  void* kept = alloc.allocate_on(777, 0, stream_a());
  for (void* p : blocks) alloc.free(p);

  alloc.empty_cache();
  CHECK(raw.live.size() == 1);  // only the block still in use
  CHECK(raw.live.count(kept) == 1);
  CHECK(raw.sync_calls == 2);  // one wait per device before its blocks go back
  CHECK(alloc.stats(0).reserved_bytes == 1024);
  CHECK(alloc.stats(1).reserved_bytes == 0);
  CHECK(alloc.stats(0).raw_free_count + alloc.stats(1).raw_free_count == 6);

  alloc.free(kept);
  alloc.empty_cache();
  CHECK(raw.live.empty());
  CHECK(alloc.stats(0).reserved_bytes == 0);
  CHECK(raw.free_calls == raw.alloc_calls);
}

TEST_CASE("caching allocator: out of memory empties the cache, retries once, then names the sizes", "[allocator]") {
  FakeRawMemory raw;
  raw.capacity_bytes = 10 * kMiB;
  CachingAllocator alloc(raw, DeviceKind::CUDA);

  // 6 MiB cached + 8 MiB new exceeds 10 MiB: the cache is emptied and the retry succeeds.
  alloc.free(alloc.allocate_on(6 * kMiB, 0, stream_a()));
  void* p = alloc.allocate_on(8 * kMiB, 0, stream_a());
  CHECK(p != nullptr);
  MemoryStats st = alloc.stats(0);
  CHECK(st.oom_retry_count == 1);
  CHECK(st.raw_free_count == 1);
  CHECK(st.reserved_bytes == 8 * kMiB);
  CHECK(raw.alloc_calls == 3);  // 6 MiB, the failed 8 MiB, the retried 8 MiB

  // 8 MiB in use + 4 MiB cannot fit even with an empty cache: a clear error, after exactly one retry.
  const int calls_before = raw.alloc_calls;
  CHECK_ERROR(alloc.allocate_on(3 * kMiB + 5, 0, stream_a()), "out of memory on cuda:0", "3145733 bytes",
              "4194304 after rounding", "8388608 bytes are allocated", "8388608 reserved");
  CHECK(raw.alloc_calls == calls_before + 2);
  CHECK(alloc.stats(0).allocated_bytes == 8 * kMiB);  // the failure changed nothing
  alloc.free(p);
}

TEST_CASE("caching allocator: freeing an unknown pointer or freeing twice is an error", "[allocator]") {
  FakeRawMemory raw;
  CachingAllocator alloc(raw, DeviceKind::CUDA);
  int x = 0;
  CHECK_ERROR(alloc.free(&x), "caching allocator", "not a block in use");
  void* p = alloc.allocate_on(64, 0, stream_a());
  alloc.free(p);
  CHECK_ERROR(alloc.free(p), "not a block in use");
  alloc.free(nullptr);  // like std::free: nothing to do
}

TEST_CASE("caching allocator: the destructor returns every block to the raw allocator", "[allocator]") {
  FakeRawMemory raw;
  {
    CachingAllocator alloc(raw, DeviceKind::CUDA);
    alloc.free(alloc.allocate_on(5000, 0, stream_a()));
    (void)alloc.allocate_on(3 * kMiB, 2, stream_b());
  }
  CHECK(raw.live.empty());
  CHECK(raw.free_calls == 2);
}

TEST_CASE("caching allocator: a real MLP training step is served from the cache after warm-up", "[allocator]") {
  // The same allocator class the CUDA backend uses, installed for CPU tensors for the length of this
  // test: every tensor of forward, backward and the optimizer step comes from it, in the order
  // ringgrad really allocates and frees them.
  static FakeRawMemory* raw = new FakeRawMemory();  // never destroyed: see below
  static CachingAllocator* cache = new CachingAllocator(*raw, DeviceKind::CPU);
  Allocator* previous = set_allocator(DeviceKind::CPU, cache);
  {
    manual_seed(3);
    nn::MLP model({64, 96, 48, 10});
    nn::optim::SGD opt(model.parameters(), nn::optim::SGDOptions(0.05).momentum(0.9));
    const Tensor x = randn({32, 64}, DType::f32, 4);
    const Tensor labels = argmax(randn({32, 10}, DType::f32, 5), 1);
    auto step = [&] {
      const Tensor loss = cross_entropy(model.forward(x), labels);
      opt.zero_grad();
      loss.backward();
      opt.step();
      return loss.item();
    };
    const double first = step();  // warm-up: momentum buffers and the cache fill
    step();
    const MemoryStats warm = cache->stats(0);
    double last = 0;
    for (int i = 0; i < 10; ++i) last = step();
    const MemoryStats after = cache->stats(0);
    INFO("raw allocations: " << warm.raw_alloc_count << " after warm-up, " << after.raw_alloc_count
                             << " after 10 more steps");
    CHECK(after.raw_alloc_count == warm.raw_alloc_count);
    CHECK(after.reserved_bytes == warm.reserved_bytes);
    CHECK(after.allocated_bytes == warm.allocated_bytes);
    CHECK(last < first);  // and it still trains
  }
  set_allocator(DeviceKind::CPU, previous);
  // Tensors made while the cache was installed (the default generator's, a module's) return their
  // blocks to it whenever they die, so it and its raw memory are never destroyed.
}
