// tests/cuda_emu/test_emulator.cpp: the emulator itself -- its warp collectives compute what CUDA's
// do, its schedules are the ones asked for, and its runtime refuses what a GPU's would.
#include <catch2/catch.hpp>

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <string>
#include <vector>

#include "cuda_emu/control.h"

namespace {

// out[t] for every t of one 64-thread block (two warps): each collective at once.
__global__ void collectives(int* out) {
  const int t = static_cast<int>(threadIdx.x), lane = t % 32;
  int* o = out + t * 8;
  o[0] = __shfl_sync(0xffffffffu, t, 5);           // lane 5 of my warp
  o[1] = __shfl_up_sync(0xffffffffu, t, 3);        // lane - 3, or my own below 3
  o[2] = __shfl_down_sync(0xffffffffu, t, 4, 16);  // lane + 4 inside my 16-lane segment
  o[3] = __shfl_xor_sync(0xffffffffu, t, 1);       // my neighbour in the pair
  o[4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  o[5] = __any_sync(0xffffffffu, t == 40);
  o[6] = __all_sync(0xffffffffu, lane < 32);
  o[7] = lane < 16 ? __shfl_xor_sync(0x0000ffffu, t, 8) : -1;  // a half-warp mask, half a warp
}

std::vector<int> run_collectives() {
  int* d = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 64 * 8 * sizeof(int)) == cudaSuccess);
  cuda_emu::launch("collectives", collectives, 1, 64, 0, nullptr, d);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<int> host(64 * 8);
  REQUIRE(cudaMemcpy(host.data(), d, host.size() * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(d);
  return host;
}

__global__ void record_order(int* order, int* next) { order[blockIdx.x * blockDim.x + threadIdx.x] = (*next)++; }

}  // namespace

TEST_CASE("cuda emulator: shuffles and votes give CUDA's results", "[cuda-emu]") {
  const std::vector<int> got = run_collectives();
  unsigned ballot = 0;
  for (int lane = 0; lane < 32; lane += 3) ballot |= 1u << lane;
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, warp = t - lane;
    const int* o = &got[static_cast<size_t>(t) * 8];
    INFO("thread " << t);
    CHECK(o[0] == warp + 5);
    CHECK(o[1] == (lane >= 3 ? t - 3 : t));
    CHECK(o[2] == (lane % 16 + 4 < 16 ? t + 4 : t));
    CHECK(o[3] == (t ^ 1));
    CHECK(static_cast<unsigned>(o[4]) == ballot);
    CHECK(o[5] == (warp == 32 ? 1 : 0));
    CHECK(o[6] == 1);
    CHECK(o[7] == (lane < 16 ? (t ^ 8) : -1));
  }
}

TEST_CASE("cuda emulator: blocks and threads run in the order of the schedule", "[cuda-emu]") {
  const cuda_emu::Schedule before = cuda_emu::schedule();
  int* d = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 9 * sizeof(int)) == cudaSuccess);
  auto order_of = [&](const char* schedule) {
    cuda_emu::set_schedule(cuda_emu::parse_schedule(schedule));
    REQUIRE(cudaMemset(d, 0, 9 * sizeof(int)) == cudaSuccess);
    cuda_emu::launch("record_order", record_order, 2, 4, 0, nullptr, d, d + 8);
    std::vector<int> host(8);
    REQUIRE(cudaMemcpy(host.data(), d, 8 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
  };
  CHECK(order_of("forward") == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(order_of("reverse") == std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0});
  const std::vector<int> r1 = order_of("random:3"), r2 = order_of("random:3");
  CHECK(r1 != order_of("forward"));
  std::vector<int> sorted = r1;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK_THROWS_AS(cuda_emu::parse_schedule("backwards"), std::invalid_argument);
  cuda_emu::set_schedule(before);
  cudaFree(d);
}

TEST_CASE("cuda emulator: copies in the wrong direction, past the end, from null or overlapping are refused",
          "[cuda-emu]") {
  std::vector<float> host(16, 1.0f);
  float* d = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 16 * sizeof(float)) == cudaSuccess);
  CHECK(cudaMemcpy(d, host.data(), 64, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(d, host.data(), 64, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);  // direction
  CHECK(cudaMemcpy(host.data(), d, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(d + 1, host.data(), 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // 4 bytes past the end
  CHECK(cudaMemcpy(d, nullptr, 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);           // null source
  CHECK(cudaMemcpy(d, nullptr, 0, cudaMemcpyHostToDevice) == cudaSuccess);                     // nothing to copy
  CHECK(cudaMemset(d, 0, 65) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(d + 1, d, 32, cudaMemcpyDeviceToDevice) == cudaErrorInvalidValue);  // overlapping areas
  CHECK(cudaMemcpy(d, d + 8, 32, cudaMemcpyDeviceToDevice) == cudaSuccess);            // adjacent: disjoint
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);                                  // the last failure, once
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaFree(host.data()) == cudaErrorInvalidValue);  // not device memory
  (void)cudaGetLastError();
  CHECK(cudaFree(d) == cudaSuccess);
}

TEST_CASE("cuda emulator: a launch with a bad configuration or stream is an error, not a run", "[cuda-emu]") {
  int* d = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 9 * sizeof(int)) == cudaSuccess);
  const uint64_t launches = cuda_emu::launch_count();
  cuda_emu::launch("record_order", record_order, 1, 2048, 0, nullptr, d, d + 8);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  cuda_emu::launch("record_order", record_order, dim3(1, 70000), 1, 0, nullptr, d, d + 8);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  cudaStream_t other = nullptr;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cuda_emu::launch("record_order", record_order, 1, 1, 0, other, d, d + 8);  // a stream of cuda:1 from cuda:0
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  CHECK(cuda_emu::launch_count() == launches + 3);
  cudaStreamDestroy(other);
  cudaFree(d);
}

TEST_CASE("cuda emulator: every device is an H200, or a small one in small-device mode", "[cuda-emu]") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  CHECK(count >= 1);
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  CHECK(std::string(prop.name).find("H200") != std::string::npos);
  CHECK(prop.major == 9);
  const char* small = std::getenv("RINGGRAD_EMU_SMALL_DEVICE");
  if (small != nullptr && std::string(small) == "1") {
    CHECK(prop.multiProcessorCount == 1);
    CHECK(prop.maxThreadsPerMultiProcessor == 256);
    CHECK(prop.maxGridSize[1] == 3);
    CHECK(prop.maxGridSize[2] == 3);
  } else {
    CHECK(prop.multiProcessorCount == 132);
    CHECK(prop.maxGridSize[1] == 65535);
  }
  CHECK(cudaGetDeviceProperties(&prop, count) == cudaErrorInvalidDevice);
  (void)cudaGetLastError();
}

TEST_CASE("cuda emulator: contexts are made as CUDA 12 makes them, per host thread", "[cuda-emu]") {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  REQUIRE(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess);
  REQUIRE(found == cudaDriverEntryPointSuccess);
  const auto ctx_get_current = reinterpret_cast<CUresult (*)(CUcontext*)>(fn);
  auto has_context = [&] {
    CUcontext c = nullptr;
    REQUIRE(ctx_get_current(&c) == CUDA_SUCCESS);
    return c != nullptr;
  };
  std::thread([&] {
    int device = -1;
    CHECK_FALSE(has_context());
    CHECK(cudaGetDevice(&device) == cudaSuccess);  // asking makes none
    CHECK(device == 0);
    CHECK_FALSE(has_context());
    CHECK(cudaSetDevice(1) == cudaSuccess);  // CUDA 12: setting makes the primary context current
    CHECK(has_context());
  }).join();
  std::thread([&] {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 16) == cudaSuccess);  // a call that needs a context makes one on cuda:0
    CHECK(has_context());
    int device = -1;
    CHECK(cudaGetDevice(&device) == cudaSuccess);
    CHECK(device == 0);
    CHECK(cudaFree(p) == cudaSuccess);
  }).join();
  const std::vector<int> devices = cuda_emu::context_devices();
  CHECK(std::find(devices.begin(), devices.end(), 0) != devices.end());
  CHECK(std::find(devices.begin(), devices.end(), 1) != devices.end());
  CHECK(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess);
  CHECK(found == cudaDriverEntryPointSymbolNotFound);
  CHECK(fn == nullptr);
}

TEST_CASE("cuda emulator: RINGGRAD_EMU_STREAMS is parsed, and a bad value names the variable", "[cuda-emu]") {
  CHECK(cuda_emu::parse_stream_settings("").mode == cuda_emu::StreamMode::Eager);
  CHECK(cuda_emu::parse_stream_settings("eager").mode == cuda_emu::StreamMode::Eager);
  CHECK(cuda_emu::parse_stream_settings("lazy").mode == cuda_emu::StreamMode::Lazy);
  CHECK(cuda_emu::parse_stream_settings("random").mode == cuda_emu::StreamMode::Random);
  CHECK(cuda_emu::parse_stream_settings("random:42").seed == 42);
  for (const char* bad : {"Lazy", "random:", "random:x", "sometimes"}) {
    INFO(bad);
    CHECK_THROWS_WITH(cuda_emu::parse_stream_settings(bad), Catch::Contains("RINGGRAD_EMU_STREAMS"));
  }
  const char* env = std::getenv("RINGGRAD_EMU_STREAMS");
  INFO("RINGGRAD_EMU_STREAMS=" << (env != nullptr ? env : "(unset)"));
  CHECK(cuda_emu::stream_settings().mode == cuda_emu::parse_stream_settings(env != nullptr ? env : "").mode);
}
