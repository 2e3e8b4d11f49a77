// cuda_emu/device.h: what CUDA device code sees -- qualifiers, threadIdx and friends, vector types,
// __syncthreads, warp shuffles and votes, and the intrinsics ringgrad's kernels use -- as host C++.
//
// How a kernel runs (tests/cuda_emu/src/scheduler.cpp): the blocks of a grid run one after another
// on the launching host thread; the threads of a block are fibers (each with its own stack, so a
// kernel's locals are per-thread as on a GPU) that switch only at __syncthreads and warp collectives.
// Those are real rendezvous points: a fiber waits there until every thread that must arrive has
// arrived, and a barrier or a full-mask shuffle that some thread never reaches stops the program
// with the kernel's name, the block and the thread.
//
// __shared__ variables are function-local statics, one per host thread: every thread of a block sees
// the same one, and blocks, which run one after another, reuse it. They are not cleared between
// blocks (a GPU does not clear them either).
#pragma once

#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local
#define __constant__ static

// ---- built-in types and variables -----------------------------------------------------------------
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) double2 {
  double x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline double2 make_double2(double x, double y) { return double2{x, y}; }

constexpr int warpSize = 32;

namespace cuda_emu {

// Where the running fiber stands in its grid; set by the scheduler before it resumes a fiber.
struct ThreadPosition {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
// The running fiber's position; null outside a kernel, where reading threadIdx stops the program.
inline thread_local const ThreadPosition* current_position = nullptr;
[[noreturn]] void outside_kernel();
inline const ThreadPosition& position() {
  if (current_position == nullptr) outside_kernel();
  return *current_position;
}

// One trip of the stride loop at file:line ended, its variable at `value`, stepping by `step`
// (RG_STEP in kernels/cuda/stride_loop.cuh; counted for RINGGRAD_EMU_LOOP_REPORT, src/loop_trips.h).
void count_trip(const char* file, int line, long long value, long long step);

// The rendezvous points (scheduler.cpp).
void syncthreads(const char* what);
void syncwarp(unsigned mask);
enum class Shuffle { Index, Up, Down, Xor };
uint64_t shuffle(Shuffle kind, unsigned mask, uint64_t bits, int operand, int width);
enum class Vote { Ballot, Any, All };
unsigned vote(Vote kind, unsigned mask, bool predicate);

template <typename T>
T shuffle_value(Shuffle kind, unsigned mask, T value, int operand, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "a shuffle moves up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = shuffle(kind, mask, bits, operand, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace cuda_emu

#define threadIdx (::cuda_emu::position().thread_idx)
#define blockIdx (::cuda_emu::position().block_idx)
#define blockDim (::cuda_emu::position().block_dim)
#define gridDim (::cuda_emu::position().grid_dim)

// ---- synchronisation ------------------------------------------------------------------------------
inline void __syncthreads() { cuda_emu::syncthreads("__syncthreads"); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { cuda_emu::syncwarp(mask); }
inline void __threadfence() {}
inline void __threadfence_block() {}

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  return cuda_emu::shuffle_value(cuda_emu::Shuffle::Index, mask, var, src_lane, width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return cuda_emu::shuffle_value(cuda_emu::Shuffle::Up, mask, var, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return cuda_emu::shuffle_value(cuda_emu::Shuffle::Down, mask, var, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  return cuda_emu::shuffle_value(cuda_emu::Shuffle::Xor, mask, var, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return cuda_emu::vote(cuda_emu::Vote::Ballot, mask, predicate != 0);
}
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(cuda_emu::vote(cuda_emu::Vote::Any, mask, predicate != 0));
}
inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(cuda_emu::vote(cuda_emu::Vote::All, mask, predicate != 0));
}

// ---- memory -----------------------------------------------------------------------------------------
template <typename T>
T __ldg(const T* p) {
  return *p;
}
// The fibers of a grid never run at the same time, so an atomic is a plain read-modify-write.
template <typename T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}

// ---- arithmetic -----------------------------------------------------------------------------------
// CUDA's integer min/max overloads; the float ones are fminf/fmaxf, as on the host.
template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
T max(T a, T b) {
  return a < b ? b : a;
}
// Rounded-to-nearest operations that are never contracted into an FMA: the emulator's sources are
// compiled with -ffp-contract=off, so a plain operator is exactly that.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
