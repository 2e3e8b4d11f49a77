// kernels/cpu/eigen_map.h: a strided row-major block of memory seen as an Eigen matrix, without a
// copy -- how the CPU kernels hand their operands to Eigen's GEMM (gemm.cpp, attention.cpp).
#pragma once

#include <Eigen/Core>

namespace ringgrad {
namespace kernels {
namespace cpu {

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// Rows `outer stride` elements apart (the leading dimension), read-only or writable.
template <typename T>
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using MatrixMap = Eigen::Map<RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
