// tests/cuda_emu/planted_kernels.cpp: the planted bugs. Each is the smallest kernel that has the
// mistake the emulator is built to catch, written as CUDA device code and compiled like
// kernels/cuda/*.cu for the emulator.
//
//   missing-sync          a shared-memory tree reduction that forgets the barrier between two
//                         levels: a thread reads a partial sum another thread has not written yet
//                         (or has already overwritten). A wrong sum in forward or in reverse order.
//   vector-off-by-one     a float4 copy whose loop runs one vector too far: reads 16 bytes past the
//                         end of the input. AddressSanitizer: heap-buffer-overflow.
//   vector-misaligned     a float4 load from a pointer 4 bytes off: UndefinedBehaviorSanitizer:
//                         misaligned address for type 'const float4'.
//   partial-warp-shuffle  a full-mask __shfl_xor_sync inside a branch that half the warp skips:
//                         the emulator stops with the lane that never arrives.
//   divergent-barrier     __syncthreads inside a branch that half the block skips: the emulator
//                         stops with the thread that never arrives.
#include "planted_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace planted {
namespace {

constexpr int kThreads = 256;

template <bool kSynced>
__global__ void block_sum(const float* x, float* out) {
  __shared__ float partial[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  partial[t] = x[t];
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) partial[t] += partial[t + half];
    if (kSynced) __syncthreads();  // the planted bug: without it, level k+1 reads level k unfinished
  }
  if (t == 0) *out = partial[0];
}

template <bool kOffByOne>
__global__ void copy_vectors(const float* x, float* y, int n) {
  const int vectors = n / 4;
  const int last = kOffByOne ? vectors : vectors - 1;  // the planted bug: <= instead of <
  for (int v = static_cast<int>(threadIdx.x); v <= last; v += static_cast<int>(blockDim.x))
    reinterpret_cast<float4*>(y)[v] = reinterpret_cast<const float4*>(x)[v];
}

__global__ void load_vector(const float* x, float* y) {
  const float4 q = *reinterpret_cast<const float4*>(x);
  y[0] = q.x + q.y + q.z + q.w;
}

template <bool kWholeWarp>
__global__ void warp_sum(const float* x, float* y) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  float v = x[threadIdx.x];
  if (kWholeWarp || lane < 16) {  // the planted bug: lanes 16..31 never reach the full-mask shuffle
    for (int delta = 16; delta > 0; delta /= 2) v += __shfl_xor_sync(0xffffffffu, v, delta);
  }
  y[threadIdx.x] = v;
}

template <bool kWholeBlock>
__global__ void scaled_copy(const float* x, float* y) {
  __shared__ float tile[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  tile[t] = x[t];
  if (kWholeBlock || t < kThreads / 2) __syncthreads();  // the planted bug: half the block skips it
  y[t] = 2.0f * tile[kThreads - 1 - t];
}

// Device memory holding `host`, and the host copy back.
struct DeviceFloats {
  explicit DeviceFloats(const std::vector<float>& host) : n(host.size()) {
    cudaMalloc(&ptr, n * sizeof(float));
    cudaMemcpy(ptr, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  }
  ~DeviceFloats() { cudaFree(ptr); }
  std::vector<float> get() const {
    std::vector<float> host(n);
    cudaMemcpy(host.data(), ptr, n * sizeof(float), cudaMemcpyDeviceToHost);
    return host;
  }
  float* f() const { return static_cast<float*>(ptr); }
  void* ptr = nullptr;
  size_t n;
};

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 7) + 0.5f;
  return v;
}

template <bool kSynced>
bool run_block_sum() {
  const std::vector<float> host = ramp(kThreads);
  DeviceFloats x(host), out(std::vector<float>(1, -1.0f));
  cuda_emu::launch("block_sum", block_sum<kSynced>, 1, kThreads, 0, nullptr, x.f(), out.f());
  float want = 0.0f;
  for (float v : host) want += v;  // every partial sum is a small integer + 0.5s: exact in float
  const float got = out.get()[0];
  std::printf("block_sum: got %g, want %g\n", got, want);
  return got == want;
}

template <bool kOffByOne>
bool run_copy_vectors() {
  const int n = 1000;  // 250 float4s: the planted loop reads the 251st
  const std::vector<float> host = ramp(n);
  DeviceFloats x(host), y(std::vector<float>(n + 4, 0.0f));
  cuda_emu::launch("copy_vectors", copy_vectors<kOffByOne>, 1, 64, 0, nullptr, x.f(), y.f(), n);
  const std::vector<float> got = y.get();
  return std::equal(host.begin(), host.end(), got.begin());
}

template <bool kMisaligned>
bool run_load_vector() {
  DeviceFloats x(ramp(8)), y(std::vector<float>(1, 0.0f));
  cuda_emu::launch("load_vector", load_vector, 1, 1, 0, nullptr, x.f() + (kMisaligned ? 1 : 0), y.f());
  return y.get()[0] == (kMisaligned ? 1.5f + 2.5f + 3.5f + 4.5f : 0.5f + 1.5f + 2.5f + 3.5f);
}

template <bool kWholeWarp>
bool run_warp_sum() {
  const std::vector<float> host = ramp(32);
  DeviceFloats x(host), y(std::vector<float>(32, 0.0f));
  cuda_emu::launch("warp_sum", warp_sum<kWholeWarp>, 1, 32, 0, nullptr, x.f(), y.f());
  float want = 0.0f;
  for (float v : host) want += v;
  const std::vector<float> got = y.get();
  return std::all_of(got.begin(), got.end(), [&](float g) { return g == want; });
}

template <bool kWholeBlock>
bool run_scaled_copy() {
  const std::vector<float> host = ramp(kThreads);
  DeviceFloats x(host), y(std::vector<float>(kThreads, 0.0f));
  cuda_emu::launch("scaled_copy", scaled_copy<kWholeBlock>, 1, kThreads, 0, nullptr, x.f(), y.f());
  const std::vector<float> got = y.get();
  for (int t = 0; t < kThreads; ++t)
    if (got[static_cast<size_t>(t)] != 2.0f * host[static_cast<size_t>(kThreads - 1 - t)]) return false;
  return true;
}

}  // namespace

std::vector<std::string> names() {
  return {"missing-sync",      "missing-sync-fixed",      "vector-off-by-one",    "vector-off-by-one-fixed",
          "vector-misaligned", "vector-misaligned-fixed", "partial-warp-shuffle", "partial-warp-shuffle-fixed",
          "divergent-barrier", "divergent-barrier-fixed"};
}

bool run(const std::string& name) {
  if (name == "missing-sync") return run_block_sum<false>();
  if (name == "missing-sync-fixed") return run_block_sum<true>();
  if (name == "vector-off-by-one") return run_copy_vectors<true>();
  if (name == "vector-off-by-one-fixed") return run_copy_vectors<false>();
  if (name == "vector-misaligned") return run_load_vector<true>();
  if (name == "vector-misaligned-fixed") return run_load_vector<false>();
  if (name == "partial-warp-shuffle") return run_warp_sum<false>();
  if (name == "partial-warp-shuffle-fixed") return run_warp_sum<true>();
  if (name == "divergent-barrier") return run_scaled_copy<false>();
  if (name == "divergent-barrier-fixed") return run_scaled_copy<true>();
  bool known = false;
  const bool right = run_async(name, &known);
  if (known) return right;
  std::fprintf(stderr, "cuda_emu_planted: unknown case '%s'\n", name.c_str());
  return false;
}

}  // namespace planted
