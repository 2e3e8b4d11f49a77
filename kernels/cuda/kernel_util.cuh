// kernels/cuda/kernel_util.cuh: what the non-GEMM kernel files share -- grid sizing, the dtype
// dispatch, bfloat16 and float16 conversions, and the collapsed strided layout that elementwise
// kernels index by.
//
// Private to kernels/cuda/*.cu (it is CUDA source, included only by nvcc-compiled files).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <ringgrad/core/base/dtype.h>
#include <ringgrad/core/base/error.h>
#include <ringgrad/core/base/strided.h>
#include "kernels/cuda/runtime.h"

namespace ringgrad {
namespace kernels {
namespace cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

constexpr int kThreads = 256;

// Blocks of `threads` for `work` independent items, at least one, capped at what fills the current
// device several times over (an H200: 132 SMs x 8 blocks of 256 x 4); grid-stride loops cover the rest.
inline unsigned blocks_for(int64_t work, int threads = kThreads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(blocks, current_device_limits().busy_blocks(threads))));
}

__device__ inline int64_t global_thread() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// The arithmetic type of a storage type: bfloat16 and float16 are loaded into float, computed on,
// and rounded back.
template <typename T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<bf16> {
  using type = float;
};
template <>
struct AccOf<f16> {
  using type = float;
};
template <typename T>
using acc_t = typename AccOf<T>::type;

// Value conversion between any two storage types; bfloat16 and float16 are widened to float, and
// narrowed from float or straight from double (double -> float -> half could round twice).
// __host__ too: the launchers convert a fill value on the host. A __device__-only function called from
// host code compiles under nvcc into a host stub that calls exit(1) -- the test
// cuda_objects_never_call_exit fails when any object of kernels/cuda references exit.
template <typename D, typename S>
__host__ __device__ inline D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (std::is_same_v<S, bf16>) {
    return convert<D>(__bfloat162float(s));
  } else if constexpr (std::is_same_v<S, f16>) {
    return convert<D>(__half2float(s));
  } else if constexpr (std::is_same_v<D, bf16>) {
    if constexpr (std::is_same_v<S, double>)
      return __double2bfloat16(s);
    else
      return __float2bfloat16_rn(static_cast<float>(s));
  } else if constexpr (std::is_same_v<D, f16>) {
    if constexpr (std::is_same_v<S, double>)
      return __double2half(s);
    else
      return __float2half_rn(static_cast<float>(s));
  } else {
    return static_cast<D>(s);
  }
}

template <typename T>
__device__ inline acc_t<T> load(const T* p) {
  return convert<acc_t<T>>(*p);
}
template <typename T>
__device__ inline T store_value(acc_t<T> v) {
  return convert<T>(v);
}

// kVec consecutive elements moved as one 16-byte (or narrower) load or store.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Elements per 16-byte vector load: 4 floats, 2 doubles, 8 bfloat16s or float16s.
constexpr int vec_width(size_t element_bytes) { return static_cast<int>(16 / element_bytes); }

// fn(T{}) with T = float, double or (when kAllow16Bit) __nv_bfloat16 and __half; any other dtype is
// an Error naming the kernel. The flag is a template parameter so that a kernel without 16-bit
// versions is never instantiated for them. The two 16-bit types share the flag: each is computed in
// float through the same template, so a kernel that takes one takes the other.
template <bool kAllow16Bit, typename Fn>
void dispatch_floating(const char* kernel, DType dt, Fn&& fn) {
  switch (dt) {
    case DType::f32: fn(float{}); return;
    case DType::f64: fn(double{}); return;
    case DType::bf16:
      if constexpr (kAllow16Bit) {
        fn(bf16{});
        return;
      }
      break;
    case DType::f16:
      if constexpr (kAllow16Bit) {
        fn(f16{});
        return;
      }
      break;
    default: break;
  }
  throw Error(detail::str(kernel, ": the CUDA backend supports float32, float64",
                          kAllow16Bit ? ", bfloat16 and float16" : "", " here, got ", dtype_name(dt)));
}

// Every storage dtype of the CUDA backend: the floating ones plus int64 and uint8.
template <typename Fn>
void dispatch_storage(const char* kernel, DType dt, Fn&& fn) {
  switch (dt) {
    case DType::f32: fn(float{}); return;
    case DType::f64: fn(double{}); return;
    case DType::i64: fn(int64_t{}); return;
    case DType::u8: fn(uint8_t{}); return;
    case DType::bf16: fn(bf16{}); return;
    case DType::f16: fn(f16{}); return;
  }
  throw Error(detail::str(kernel, ": unknown dtype ", static_cast<int>(dt)));
}

// kOperands arrays walked in lockstep over one shape, with dimensions of size 1 dropped and adjacent
// dimensions merged wherever every operand is contiguous across them. A dense array collapses to one
// dimension, a row-broadcast bias to two: the per-element index arithmetic (a 64-bit divide per
// dimension) shrinks with it.
template <int kOperands>
struct Layout {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kOperands][kMaxDims] = {};
};

template <int kOperands>
Layout<kOperands> collapse(int ndim, const int64_t* shape, const int64_t* const (&strides)[kOperands]) {
  // Built innermost first, then reversed.
  Layout<kOperands> rev;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    bool merge = rev.ndim > 0;
    for (int k = 0; k < kOperands && merge; ++k) {
      const int last = rev.ndim - 1;
      merge = strides[k][d] == rev.strides[k][last] * rev.shape[last];
    }
    if (merge) {
      rev.shape[rev.ndim - 1] *= shape[d];
      continue;
    }
    rev.shape[rev.ndim] = shape[d];
    for (int k = 0; k < kOperands; ++k) rev.strides[k][rev.ndim] = strides[k][d];
    ++rev.ndim;
  }
  Layout<kOperands> out;
  out.ndim = rev.ndim;
  for (int d = 0; d < rev.ndim; ++d) {
    out.shape[d] = rev.shape[rev.ndim - 1 - d];
    for (int k = 0; k < kOperands; ++k) out.strides[k][d] = rev.strides[k][rev.ndim - 1 - d];
  }
  return out;
}

// Element offsets of the row-major linear index i in each operand.
template <int kOperands>
__device__ inline void offsets_of(const Layout<kOperands>& l, int64_t i, int64_t (&off)[kOperands]) {
  for (int k = 0; k < kOperands; ++k) off[k] = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    const int64_t size = l.shape[d];
    const int64_t idx = i % size;
    i /= size;
    for (int k = 0; k < kOperands; ++k) off[k] += idx * l.strides[k][d];
  }
}

// Contiguous (row-major) strides for a shape.
inline void contiguous_strides(int ndim, const int64_t* shape, int64_t* strides) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
}

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
