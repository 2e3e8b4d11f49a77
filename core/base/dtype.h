/// @file
/// core/base/dtype.h: the element types a tensor can hold.
#pragma once

#include <cstdint>
#include <ostream>

namespace ringgrad {

/// float32 is the working type everywhere; float64 exists on CPU for gradient checks; int64 holds
/// labels and indices; uint8 raw data (images). bfloat16 is reserved for the CUDA tensor-core path
/// and is rejected by the CPU kernels; float16 (IEEE half) likewise, and DDP's fp16 communication
/// hook sends gradients in it. New dtypes go at the end, so that the existing ones keep their numbers.
enum class DType : uint8_t { f32, f64, i64, u8, bf16, f16 };

/// Bytes per element.
inline int64_t dtype_size(DType dt) {
  switch (dt) {
    case DType::f32: return 4;
    case DType::f64:
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::bf16:
    case DType::f16: return 2;
  }
  return 0;
}

/// Names follow PyTorch ("float32"), so error messages read the same to its users.
inline const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
  }
  return "?";
}

/// True for float32, float64, bfloat16 and float16.
inline bool is_floating(DType dt) {
  return dt == DType::f32 || dt == DType::f64 || dt == DType::bf16 || dt == DType::f16;
}

/// The dtype an op computes in when its operands' dtypes differ, as PyTorch's torch.promote_types: a
/// floating dtype beats an integer one, a wider one a narrower one, and bfloat16 with float16 gives
/// float32 (neither holds the other's values). So a uint8 mask times a float32 tensor is float32.
inline DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_floating(a) != is_floating(b)) return is_floating(a) ? a : b;
  if (!is_floating(a)) return DType::i64;  // uint8 with int64
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;  // f32 with a 16-bit type, or bfloat16 with float16
}

inline std::ostream& operator<<(std::ostream& os, DType dt) { return os << dtype_name(dt); }  ///< prints dtype_name(dt)

/// Maps a C++ type to its DType, for typed accessors such as `data<float>()` and `item<double>()`.
template <typename T>
struct dtype_of;
/// float -> DType::f32.
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;  ///< the DType of the C++ type
};
/// double -> DType::f64.
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;  ///< the DType of the C++ type
};
/// int64_t -> DType::i64.
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;  ///< the DType of the C++ type
};
/// uint8_t -> DType::u8.
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;  ///< the DType of the C++ type
};

}  // namespace ringgrad
