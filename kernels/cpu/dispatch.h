// kernels/cpu/dispatch.h: turns a runtime DType into a C++ element type for the CPU kernels.
//
// A kernel is written once as a template on its element type T; dispatch_floating() calls it with
// float or double and rejects every other dtype with a message naming the kernel:
//
//   dispatch_floating("unary", dt, [&](auto zero) {
//     using T = decltype(zero);
//     ...
//   });
//   // ringgrad::Error: unary: the CPU backend supports float32 and float64, got bfloat16
#pragma once

#include <cstdint>

#include <ringgrad/core/base/dtype.h>
#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace kernels {
namespace cpu {

template <typename Fn>
void dispatch_floating(const char* kernel, DType dt, Fn&& fn) {
  RINGGRAD_CHECK(dt == DType::f32 || dt == DType::f64, kernel, ": the CPU backend supports float32 and float64, got ",
                 dtype_name(dt));
  if (dt == DType::f32) {
    fn(float{});
  } else {
    fn(double{});
  }
}

// The storage types the CPU holds: the floating ones plus int64 (labels, indices) and uint8 (raw
// images). bfloat16 and float16 are computed only on CUDA: the host holds them, this backend rejects them.
template <typename Fn>
void dispatch_storage(const char* kernel, DType dt, Fn&& fn) {
  switch (dt) {
    case DType::f32: fn(float{}); return;
    case DType::f64: fn(double{}); return;
    case DType::i64: fn(int64_t{}); return;
    case DType::u8: fn(uint8_t{}); return;
    default: break;
  }
  throw Error(
      detail::str(kernel, ": the CPU backend supports float32, float64, int64 and uint8, got ", dtype_name(dt)));
}

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
