// kernels/cpu/gemm_epilogue.h: what a CPU GEMM does to a finished block of C -- add the bias, then
// apply the activation -- while the block is still in cache (gemm.cpp, sgemm.cpp).
#pragma once

#include <cstdint>

#include <ringgrad/kernels/backend.h>    // Activation
#include <ringgrad/kernels/unary_ops.h>  // the activations: the same functors as relu() and gelu()

namespace ringgrad {
namespace kernels {
namespace cpu {

// C[i, :] = act(C[i, :] + bias) for the m x n block at c, rows ldc apart.
template <typename T>
void gemm_epilogue(T* c, int64_t m, int64_t n, int64_t ldc, const T* bias, Activation activation) {
  if (bias == nullptr && activation == Activation::None) return;
  for (int64_t i = 0; i < m; ++i) {
    T* row = c + i * ldc;
    if (bias != nullptr)
      for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
    switch (activation) {
      case Activation::None: break;
      case Activation::Relu:
        for (int64_t j = 0; j < n; ++j) row[j] = unary_ops::Relu::forward(row[j], T(0));
        break;
      case Activation::GeluTanh:
        for (int64_t j = 0; j < n; ++j) row[j] = unary_ops::GeluTanh::forward(row[j], T(0));
        break;
    }
  }
}

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
